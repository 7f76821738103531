// Package scram is the server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as
// PostgreSQL speaks it: secrets in PostgreSQL's stored format and the two-step
// exchange that verifies a client's proof.
//
// Channel binding (SCRAM-SHA-256-PLUS) is not implemented, so a server using
// this package must advertise only "SCRAM-SHA-256". A client that supports
// binding but was not offered it sends the gs2 flag "y" and is accepted; a
// client that insists on binding ("p=…") is refused.
//
// Passwords are used as their UTF-8 bytes (no SASLprep normalisation): the same
// result as PostgreSQL for ASCII passwords.
//
// The package is pure: randomness (the server nonce, salts) is a parameter.
package scram

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mechanism is the only SASL mechanism offered.
const Mechanism = "SCRAM-SHA-256"

// DefaultIterations is PostgreSQL's default scram_iterations.
const DefaultIterations = 4096

// ErrAuthFailed is returned when the client's proof does not match the secret.
var ErrAuthFailed = errors.New("scram: authentication failed")

// Secret is what a server stores to verify a password.
type Secret struct {
	Iterations int
	Salt       []byte
	StoredKey  [32]byte
	ServerKey  [32]byte
}

// IsSecret reports whether s looks like a stored SCRAM secret rather than a plaintext password.
func IsSecret(s string) bool { return strings.HasPrefix(s, "SCRAM-SHA-256$") }

// ParseSecret parses PostgreSQL's format
// "SCRAM-SHA-256$<iterations>:<salt b64>$<StoredKey b64>:<ServerKey b64>".
func ParseSecret(s string) (Secret, error) {
	var sec Secret
	rest, ok := strings.CutPrefix(s, "SCRAM-SHA-256$")
	if !ok {
		return sec, errors.New("scram: secret: missing SCRAM-SHA-256$ prefix")
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return sec, errors.New("scram: secret: want iterations:salt$stored:server")
	}
	it, salt, ok := strings.Cut(params, ":")
	if !ok {
		return sec, errors.New("scram: secret: want iterations:salt")
	}
	n, err := strconv.Atoi(it)
	if err != nil || n < 1 {
		return sec, fmt.Errorf("scram: secret: bad iteration count %q", it)
	}
	sec.Iterations = n
	if sec.Salt, err = base64.StdEncoding.DecodeString(salt); err != nil {
		return sec, fmt.Errorf("scram: secret: salt: %w", err)
	}
	stored, server, ok := strings.Cut(keys, ":")
	if !ok {
		return sec, errors.New("scram: secret: want stored:server keys")
	}
	for _, kv := range []struct {
		dst *[32]byte
		src string
	}{{&sec.StoredKey, stored}, {&sec.ServerKey, server}} {
		b, err := base64.StdEncoding.DecodeString(kv.src)
		if err != nil || len(b) != 32 {
			return sec, errors.New("scram: secret: keys must be 32 bytes base64")
		}
		copy(kv.dst[:], b)
	}
	return sec, nil
}

// String formats the secret in PostgreSQL's format.
func (s Secret) String() string {
	b := base64.StdEncoding
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", s.Iterations, b.EncodeToString(s.Salt),
		b.EncodeToString(s.StoredKey[:]), b.EncodeToString(s.ServerKey[:]))
}

func hmacSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// NewSecret derives the secret of password with the given salt and iterations.
func NewSecret(password string, salt []byte, iterations int) (Secret, error) {
	if iterations < 1 {
		iterations = DefaultIterations
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, 32)
	if err != nil {
		return Secret{}, fmt.Errorf("scram: derive: %w", err)
	}
	clientKey := hmacSHA256(salted, []byte("Client Key"))
	s := Secret{Iterations: iterations, Salt: append([]byte(nil), salt...)}
	s.StoredKey = sha256.Sum256(clientKey)
	copy(s.ServerKey[:], hmacSHA256(salted, []byte("Server Key")))
	return s, nil
}

// Conversation is one server-side exchange. Use First, then Final. Not safe
// for concurrent use.
type Conversation struct {
	secret          Secret
	serverNonce     string
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	nonce           string // client nonce + server nonce
	step            int
}

// NewConversation starts an exchange against secret. serverNonce must be
// fresh random printable ASCII without ',' (e.g. base64 of 18 random bytes).
func NewConversation(secret Secret, serverNonce string) *Conversation {
	return &Conversation{secret: secret, serverNonce: serverNonce}
}

// First takes the client-first-message (the SASLInitialResponse data) and
// returns the server-first-message.
func (c *Conversation) First(clientFirst []byte) ([]byte, error) {
	if c.step != 0 {
		return nil, errors.New("scram: First called twice")
	}
	c.step = 1
	msg := string(clientFirst)
	// gs2-header: cbind-flag "," [authzid] ","
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return nil, errors.New("scram: malformed client-first-message")
	}
	switch {
	case flag == "n" || flag == "y":
	case strings.HasPrefix(flag, "p="):
		return nil, errors.New("scram: channel binding requested but SCRAM-SHA-256-PLUS was not offered")
	default:
		return nil, fmt.Errorf("scram: bad gs2 channel-binding flag %q", flag)
	}
	authzid, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, errors.New("scram: malformed client-first-message")
	}
	if authzid != "" {
		return nil, errors.New("scram: authorization identity not supported")
	}
	c.gs2Header = flag + "," + authzid + ","
	c.clientFirstBare = bare
	var clientNonce string
	for _, attr := range strings.Split(bare, ",") {
		if strings.HasPrefix(attr, "m=") {
			return nil, errors.New("scram: mandatory extension not supported")
		}
		if v, ok := strings.CutPrefix(attr, "r="); ok {
			clientNonce = v
		}
	}
	if clientNonce == "" || strings.ContainsAny(clientNonce, ",") {
		return nil, errors.New("scram: client-first-message without nonce")
	}
	c.nonce = clientNonce + c.serverNonce
	c.serverFirst = "r=" + c.nonce + ",s=" + base64.StdEncoding.EncodeToString(c.secret.Salt) +
		",i=" + strconv.Itoa(c.secret.Iterations)
	return []byte(c.serverFirst), nil
}

// Final takes the client-final-message and returns the server-final-message
// ("v=…") when the proof is right, or ErrAuthFailed.
func (c *Conversation) Final(clientFinal []byte) ([]byte, error) {
	if c.step != 1 {
		return nil, errors.New("scram: Final before First")
	}
	c.step = 2
	msg := string(clientFinal)
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, errors.New("scram: client-final-message without proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	var cbind, nonce string
	for _, attr := range strings.Split(withoutProof, ",") {
		if v, ok := strings.CutPrefix(attr, "c="); ok {
			cbind = v
		} else if v, ok := strings.CutPrefix(attr, "r="); ok {
			nonce = v
		}
	}
	if cbind != base64.StdEncoding.EncodeToString([]byte(c.gs2Header)) {
		return nil, errors.New("scram: channel binding data does not match")
	}
	if nonce != c.nonce {
		return nil, errors.New("scram: nonce mismatch")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != 32 {
		return nil, ErrAuthFailed
	}
	authMessage := []byte(c.clientFirstBare + "," + c.serverFirst + "," + withoutProof)
	clientSig := hmacSHA256(c.secret.StoredKey[:], authMessage)
	clientKey := make([]byte, 32)
	for i := range clientKey {
		clientKey[i] = proof[i] ^ clientSig[i]
	}
	got := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(got[:], c.secret.StoredKey[:]) != 1 {
		return nil, ErrAuthFailed
	}
	serverSig := hmacSHA256(c.secret.ServerKey[:], authMessage)
	var b bytes.Buffer
	b.WriteString("v=")
	b.WriteString(base64.StdEncoding.EncodeToString(serverSig))
	return b.Bytes(), nil
}
