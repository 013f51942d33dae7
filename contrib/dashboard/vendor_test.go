package dashboard

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vendored are the committed third-party files and where each comes from
// in its npm package.
var vendored = []struct {
	pkg, inTarball, committed string
}{
	{"uplot", "package/dist/uPlot.iife.min.js", "static/vendor/uplot/uPlot.iife.min.js"},
	{"uplot", "package/dist/uPlot.min.css", "static/vendor/uplot/uPlot.min.css"},
	{"uplot", "package/LICENSE", "static/vendor/uplot/LICENSE"},
}

// TestVendoredAssets: the chart library the dashboard serves is exactly
// the one npm/package-lock.json pins. npm pack fetches the package's
// tarball, its SHA-512 must equal the lock file's integrity, and each
// committed file must equal the tarball's. To upgrade: change the
// version in npm/package.json, run npm install there, copy the files from
// node_modules/uplot and commit the three together.
func TestVendoredAssets(t *testing.T) {
	t.Parallel()
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	b, err := os.ReadFile(filepath.Join("npm", "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	tarballs := map[string]map[string][]byte{}
	for _, v := range vendored {
		if tarballs[v.pkg] != nil {
			continue
		}
		p, ok := lock.Packages["node_modules/"+v.pkg]
		if !ok || p.Version == "" || !strings.HasPrefix(p.Integrity, "sha512-") {
			t.Fatalf("npm/package-lock.json pins no %s with a sha512 integrity", v.pkg)
		}
		dir := t.TempDir()
		cmd := exec.Command("npm", "pack", "--silent", "--pack-destination", dir, v.pkg+"@"+p.Version)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm pack %s@%s (node and npm: .ci/services.sh ensure_node): %v\n%s", v.pkg, p.Version, err, out)
		}
		matches, _ := filepath.Glob(filepath.Join(dir, "*.tgz"))
		if len(matches) != 1 {
			t.Fatalf("npm pack %s left %v", v.pkg, matches)
		}
		tgz, err := os.ReadFile(matches[0])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha512.Sum512(tgz)
		if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != p.Integrity {
			t.Fatalf("%s@%s's tarball has integrity %s; the lock file says %s", v.pkg, p.Version, got, p.Integrity)
		}
		files, err := untar(tgz)
		if err != nil {
			t.Fatalf("%s's tarball: %v", v.pkg, err)
		}
		tarballs[v.pkg] = files
	}
	for _, v := range vendored {
		want, ok := tarballs[v.pkg][v.inTarball]
		if !ok {
			t.Errorf("%s's tarball has no %s", v.pkg, v.inTarball)
			continue
		}
		got, err := os.ReadFile(v.committed)
		if err != nil {
			t.Errorf("%s: %v", v.committed, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s in %s's tarball (the lock file's): copy it again from node_modules", v.committed, v.inTarball, v.pkg)
		}
	}
	// The handler serves what is committed.
	for _, v := range vendored[:2] {
		b, err := staticFiles.ReadFile(v.committed)
		if err != nil || len(b) == 0 {
			t.Errorf("%s is not embedded: %v", v.committed, err)
		}
	}
}

func untar(tgz []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 8<<20))
		if err != nil {
			return nil, err
		}
		out[h.Name] = b
	}
}
