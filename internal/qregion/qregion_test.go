package qregion

import "testing"

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"US_EAST_1": USEast1, "us-east-1": USEast1, "US-EAST-1": USEast1, " eu-central-1 ": EUCentral1,
	} {
		if got, ok := Normalize(in); !ok || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "ap-south-1", "US_EAST_2"} {
		if got, ok := Normalize(in); ok {
			t.Errorf("Normalize(%q) = %q, true; want false", in, got)
		}
	}
	if h := Header(USEast1); h != "US-EAST-1" {
		t.Errorf("Header = %q", h)
	}
	if u := BaseURL(USEast1); u != "https://qstash-us-east-1.upstash.io" {
		t.Errorf("BaseURL = %q", u)
	}
}
