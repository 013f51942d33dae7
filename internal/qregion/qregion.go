// Package qregion names QStash's regions, for the publisher, the receiver
// and qstashdev: one reading of the Upstash-Region header, kept in one
// place.
//
// QStash runs in two independent regions, each with its own API URL,
// token and signing keys. Deliveries carry the region they come from in
// the Upstash-Region header, which receivers use to pick that region's
// keys. The official TypeScript SDK reads the header by upper-casing it
// and turning '-' into '_' ("us-east-1" and "US-EAST-1" both name
// US_EAST_1); Normalize does the same.
package qregion

import "strings"

// The regions, spelled as QStash's environment variables spell them
// (QSTASH_REGION=US_EAST_1, US_EAST_1_QSTASH_TOKEN, ...).
const (
	EUCentral1 = "EU_CENTRAL_1"
	USEast1    = "US_EAST_1"
)

// All lists the regions.
var All = []string{EUCentral1, USEast1}

// Normalize reads a region as a header or an environment variable may
// spell it, and reports whether it names a known region.
func Normalize(s string) (string, bool) {
	r := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	for _, k := range All {
		if r == k {
			return k, true
		}
	}
	return "", false
}

// Header is the Upstash-Region value of a region: "US-EAST-1".
func Header(region string) string { return strings.ReplaceAll(region, "_", "-") }

// BaseURL is the QStash API of a region: https://qstash-us-east-1.upstash.io.
func BaseURL(region string) string {
	return "https://qstash-" + strings.ToLower(Header(region)) + ".upstash.io"
}
