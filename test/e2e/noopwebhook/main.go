// Command noopwebhook is the floor of any mutating webhook for the e2e scale
// scenario: it decodes each AdmissionReview and allows it unchanged, over TLS
// 1.2+ with HTTP/2 off (as ibkube-webhook serves). It ships in the e2e test
// image and runs as a Deployment shaped like the chart's webhook.
//
//	noopwebhook -addr :9443 -cert tls.crt -key tls.key
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"

	admissionv1 "k8s.io/api/admission/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9444", "listen address")
	cert := flag.String("cert", "", "TLS certificate")
	key := flag.String("key", "", "TLS key")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", handle)
	srv := &http.Server{
		Addr:         *addr,
		Handler:      mux,
		TLSConfig:    &tls.Config{MinVersion: tls.VersionTLS12},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/2 off
	}
	if err := srv.ListenAndServeTLS(*cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, "noopwebhook:", err)
		os.Exit(1)
	}
}

func handle(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}
