package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		// Well-formed URLs keep their user.
		"postgres://app:hunter2@db:5432/x":  "postgres://app:***@db:5432/x",
		"amqp://guest:guest@mq:5672/":       "amqp://guest:***@mq:5672/",
		"nats://user:pw@nats:4222":          "nats://user:***@nats:4222",
		"postgres://app:p%40ss@db/x":        "postgres://app:***@db/x",
		"postgres://app@db:5432/x":          "postgres://app@db:5432/x",
		"https://q.example/v2/publish":      "https://q.example/v2/publish",
		"postgres://db/x?sslmode=disable":   "postgres://db/x?sslmode=disable",
		"postgres://app:***@db:5432/x":      "postgres://app:***@db:5432/x",
		"dial postgres://app:pw@db: failed": "dial postgres://app:***@db: failed",
		// Hostile passwords: an unescaped "@", "/" or space. The URL does
		// not parse (or parses wrongly); the whole userinfo goes.
		"postgres://app:p@ss@db:5432/x":        "postgres://***@db:5432/x",
		"postgres://app:pa/ss@db:5432/x":       "postgres://***@db:5432/x",
		"postgres://app:pa ss@db:5432/x":       "postgres://***@db:5432/x",
		"postgres://app:a@b/c d?e#f@db:5432/x": "postgres://***@db:5432/x",
		"postgres://a pp:pw@db/x":              "postgres://***@db/x",
		// pgx's own half-redacted echo of a URL it could not parse.
		"cannot parse `postgres://app:xxxxx@ss/w rd@db:5432/x`: failed": "cannot parse `postgres://***@db:5432/x`: failed",
		// The NATS token form, and user-only userinfo outside PostgreSQL.
		"nats://s3cr3tT0ken@nats:4222":        "nats://***@nats:4222",
		"cannot reach NATS at nats://tok@h:1": "cannot reach NATS at nats://***@h:1",
		"https://ghp_token@github.example/x":  "https://***@github.example/x",
		// Several URLs in one message.
		"from postgres://a:b@h1/x to nats://tok@h2": "from postgres://a:***@h1/x to nats://***@h2",
		// Keyword/value connection strings.
		"host=db user=app password=hunter2 dbname=x":         "host=db user=app password=*** dbname=x",
		"host=db password='p w@x' dbname=x":                  "host=db password=*** dbname=x",
		`host=db password='it\'s a secret' dbname=x`:         "host=db password=*** dbname=x",
		`host=db password=a\ b dbname=x`:                     "host=db password=*** dbname=x",
		"host=db password = 'x y' dbname=x":                  "host=db password = *** dbname=x",
		"host=db password='never closed dbname=x":            "host=db password=***",
		"failed: password=p@ss":                              "failed: password=***",
		"PGPASSWORD=hunter2 psql":                            "PGPASSWORD=*** psql",
		"sslpassword=k3y sslmode=verify-full":                "sslpassword=*** sslmode=verify-full",
		"PASSWORD=X":                                         "PASSWORD=***",
		"user=app dbname=x":                                  "user=app dbname=x",
		`{"dsn":"host=db password=hunter2"}`:                 `{"dsn":"host=db password=***`,
		"https://q.example/v2?qstash_token=abc&x=1":          "https://q.example/v2?qstash_token=***&x=1",
		"postgres://db/x?password=hunter2&sslmode=disable":   "postgres://db/x?password=***&sslmode=disable",
		"postgres://db/x?sslmode=disable&sslpassword=k#frag": "postgres://db/x?sslmode=disable&sslpassword=***#frag",
		"Authorization: Bearer tok_123 refused":              "Authorization: Bearer *** refused",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q)\n got %q\nwant %q", in, got, want)
		}
		if got := String(String(in)); got != String(in) {
			t.Errorf("String is not idempotent on %q: %q", in, got)
		}
	}
}

// hostilePasswords are passwords with every character that breaks a URL or
// a keyword/value string.
var hostilePasswords = []string{
	"p@ss", "pa/ss", "pa ss", "a@b/c d", "x:y@z", "q?u#e", "it's", `back\slash`, "üñí@côdé", "trail@", "@lead", "p%40ss",
}

// TestStringHidesHostilePasswords: whatever the password, String alone
// removes it from the URL and keyword/value forms, and with Secrets from a
// message that mangles the URL around it.
func TestStringHidesHostilePasswords(t *testing.T) {
	t.Parallel()
	for _, pw := range hostilePasswords {
		kvQuoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		for _, conn := range []string{
			"postgres://app:" + pw + "@db:5432/x?sslmode=disable",
			"https://user:" + pw + "@q.example/v2",
			"nats://" + pw + "@nats:4222",
			"amqp://guest:" + pw + "@mq:5672/",
			"host=db user=app password=" + kvQuoted + " dbname=x",
		} {
			for _, msg := range []string{
				conn,
				"cannot reach PostgreSQL at " + conn + ": connection refused",
				`parse "` + conn + `": invalid port`,
			} {
				if got := String(msg); strings.Contains(got, pw) {
					t.Errorf("String(%q) = %q: the password %q is left", msg, got, pw)
				}
			}
			// A driver that cut the string at the first "@" and echoed the
			// rest: only the known secrets can find what remains.
			mangled := "login failed for " + pw + " at db"
			if got := String(mangled, Secrets(conn)...); strings.Contains(got, pw) {
				t.Errorf("String(%q, Secrets(%q)) = %q: the password is left", mangled, conn, got)
			}
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	for conn, want := range map[string][]string{
		"postgres://app:p@ss/w rd@db/x":           {"p@ss/w rd", "p%40ss%2Fw%20rd"},
		"postgres://app:p%40ss@db/x":              {"p%40ss", "p@ss"},
		"nats://tok3n@nats:4222":                  {"tok3n"},
		`host=db password='it\'s x' dbname=y`:     {"it's x"},
		"postgres://db/x?password=s%20cret&a=1":   {"s cret"},
		"postgres://app@db/x":                     nil,
		"https://q.example/v2?qstash_token=abc12": {"abc12"},
	} {
		got := Secrets(conn)
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("Secrets(%q) = %q, want it to hold %q", conn, got, w)
			}
		}
		if want == nil && len(got) != 0 {
			t.Errorf("Secrets(%q) = %q, want none", conn, got)
		}
	}
}

func TestShortSecretsAreLeftToThePatterns(t *testing.T) {
	t.Parallel()
	if got := String("a db error", "a", "db"); got != "a db error" {
		t.Errorf("short secrets replaced: %q", got)
	}
	if got := String("postgres://app:ab@db/x", "ab"); got != "postgres://app:***@db/x" {
		t.Errorf("short password in a URL: %q", got)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"postgres://app:p@ss@db/x", "host=db password='a", "nats://tok@h", "x://@", "a://b://c@d"} {
		f.Add(s, "hunter2")
	}
	f.Fuzz(func(t *testing.T, s, secret string) {
		got := String(s, secret)
		if len(secret) >= MinSecretLen && !strings.Contains(Mask, secret) && strings.Contains(got, secret) && !strings.Contains(strings.ReplaceAll(s, secret, ""), secret) {
			t.Fatalf("String(%q, %q) = %q keeps the secret", s, secret, got)
		}
		if again := String(got); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	})
}
