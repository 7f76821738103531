package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// client computes a client-final-message the way RFC 5802 §3 says, to drive
// the server side in tests.
func clientFinal(t *testing.T, password, gs2, clientFirstBare, serverFirst string) string {
	t.Helper()
	var nonce, salt string
	iter := 0
	for _, a := range strings.Split(serverFirst, ",") {
		switch {
		case strings.HasPrefix(a, "r="):
			nonce = a[2:]
		case strings.HasPrefix(a, "s="):
			salt = a[2:]
		case strings.HasPrefix(a, "i="):
			for _, c := range a[2:] {
				iter = iter*10 + int(c-'0')
			}
		}
	}
	s, _ := base64.StdEncoding.DecodeString(salt)
	salted, _ := pbkdf2.Key(sha256.New, password, s, iter, 32)
	mac := func(k []byte, m string) []byte { h := hmac.New(sha256.New, k); h.Write([]byte(m)); return h.Sum(nil) }
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(gs2)) + ",r=" + nonce
	auth := clientFirstBare + "," + serverFirst + "," + withoutProof
	sig := mac(stored[:], auth)
	proof := make([]byte, 32)
	for i := range proof {
		proof[i] = clientKey[i] ^ sig[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)
}

func TestSecretRoundTrip(t *testing.T) {
	sec, err := NewSecret("pencil", []byte("0123456789abcdef"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSecret(sec.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != sec.String() {
		t.Fatalf("round trip %q != %q", got, sec)
	}
}

func TestParseSecretErrors(t *testing.T) {
	for _, s := range []string{
		"", "md5abc", "SCRAM-SHA-256$", "SCRAM-SHA-256$x:AAAA$AAAA:AAAA", "SCRAM-SHA-256$4096:AAAA$AAAA",
		"SCRAM-SHA-256$4096:@@@$AAAA:AAAA", "SCRAM-SHA-256$4096:AAAA$AAAA:AAAA", "SCRAM-SHA-256$0:AAAA$AAAA:AAAA",
	} {
		if _, err := ParseSecret(s); err == nil {
			t.Errorf("ParseSecret(%q): no error", s)
		}
	}
}

func TestExchange(t *testing.T) {
	sec, _ := NewSecret("pencil", []byte("saltsaltsaltsalt"), 4096)
	cases := []struct {
		name     string
		gs2      string
		password string
		wantErr  error
	}{
		{"no binding support", "n,,", "pencil", nil},
		{"binding supported, not offered", "y,,", "pencil", nil},
		{"wrong password", "n,,", "pen", ErrAuthFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conv := NewConversation(sec, "SERVERNONCE")
			bare := "n=,r=clientnonce"
			sf, err := conv.First([]byte(c.gs2 + bare))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(sf), "r=clientnonceSERVERNONCE,s=") || !strings.HasSuffix(string(sf), ",i=4096") {
				t.Fatalf("server-first %q", sf)
			}
			final, err := conv.Final([]byte(clientFinal(t, c.password, c.gs2, bare, string(sf))))
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Final: %v, want %v", err, c.wantErr)
			}
			if err == nil && !strings.HasPrefix(string(final), "v=") {
				t.Fatalf("server-final %q", final)
			}
		})
	}
}

func TestExchangeRejects(t *testing.T) {
	sec, _ := NewSecret("pencil", []byte("saltsaltsaltsalt"), 4096)
	for _, first := range []string{
		"p=tls-server-end-point,,n=,r=abc", // binding demanded but not offered
		"x,,n=,r=abc",
		"n,a=admin,n=,r=abc",
		"n,,n=,m=ext,r=abc",
		"n,,n=",
		"garbage",
	} {
		if _, err := NewConversation(sec, "S").First([]byte(first)); err == nil {
			t.Errorf("First(%q): no error", first)
		}
	}
	// Channel-binding flag changed between messages.
	conv := NewConversation(sec, "S")
	sf, _ := conv.First([]byte("n,,n=,r=abc"))
	if _, err := conv.Final([]byte(clientFinal(t, "pencil", "y,,", "n=,r=abc", string(sf)))); err == nil {
		t.Error("Final with mismatched gs2 header: no error")
	}
	// Nonce tampering.
	conv = NewConversation(sec, "S")
	conv.First([]byte("n,,n=,r=abc"))
	if _, err := conv.Final([]byte("c=biws,r=abcX,p=AAAA")); err == nil {
		t.Error("Final with wrong nonce: no error")
	}
}
