package qstashdev

import "net/http"

// SigningKeys are the keys deliveries are signed with. QStash signs with
// Current; verifiers also accept Next so a rotation never breaks them.
type SigningKeys struct {
	// Current signs deliveries.
	Current string `json:"current"`
	// Next becomes Current at the next rotation.
	Next string `json:"next"`
}

// Keys returns the signing keys.
func (s *Server) Keys() SigningKeys {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// RotateKeys makes the next key current and a fresh random key next, as
// POST /v2/keys/rotate does, and returns the new pair. Deliveries signed
// from now on use the new current key.
func (s *Server) RotateKeys() SigningKeys {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = SigningKeys{Current: s.keys.Next, Next: newSigningKey()}
	s.signer.Store(newSigner(s.keys.Current))
	s.signalChangeLocked()
	return s.keys
}

// handleKeys serves GET /v2/keys.
func (s *Server) handleKeys(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
	writeJSON(w, http.StatusOK, s.Keys())
}

// handleRotate serves POST /v2/keys/rotate and POST /v2/rotate (the path
// the Go SDK calls).
func (s *Server) handleRotate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	writeJSON(w, http.StatusOK, s.RotateKeys())
}
