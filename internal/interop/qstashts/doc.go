// Package qstashts drives qstashdev with the official QStash TypeScript
// SDK (@upstash/qstash, the most used QStash client), unchanged: the Go
// test starts qstashdev servers on loopback ports, installs the SDK with
// `npm ci` from the committed lock file in testdata (into
// testdata/node_modules, with npm's cache in testdata/.npm-cache so later
// runs need no network), and runs `node --test` on testdata/suite.test.mjs,
// which publishes, batches, enqueues, cancels, lists and retries through the
// SDK and verifies every delivery with the SDK's Receiver.
//
// Node.js and npm are required: the test fails, never skips, without them
// (.ci/services.sh installs them). It holds tests only, in the interop
// module beside the Go SDK's (internal/interop/qstashsdk).
package qstashts
