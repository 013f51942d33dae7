// Package sigmatrix is the QStash signature matrix: tokens a receiver must
// accept or refuse, each with the error qstash.Verifier reports and what the
// official Go SDK's verifier (github.com/upstash/qstash-go v1.0.0) does with
// the same token, so the places where the SDK is weaker stay documented and
// checked.
//
// Two test packages run it, and neither may keep a copy of its own:
// qstash's tests send every row to Verifier and Receiver, and
// internal/interop/qstashsdk sends every row to the SDK. The SDK lives in a
// module of its own so the root module never requires it; this package
// imports only qstash and golang-jwt, so it stays in the root module.
//
//	for _, tc := range sigmatrix.Cases(sigmatrix.Target{CurrentKey: cur, NextKey: next, URL: u, Now: now}) {
//		tok := tc.Token(t, body)
//		err := verifier.Verify(tok, body, u) // errors.Is(err, tc.WantErr)
//	}
//
// Tokens are minted with golang-jwt, an implementation independent of the
// one under test.
package sigmatrix
