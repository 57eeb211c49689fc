// Command kubeconfig-go prints, as one JSON line, what client-go would use for one
// kubeconfig when Go's cloud-controller-manager loads it: k8s.io/cloud-provider's options
// call clientcmd.BuildConfigFromFlags("", FILE), and the clientset builds its transport
// with rest.HTTPClientFor -> rest.Config.TransportConfig -> transport.New. The differential
// test of our Rust kubeconfig reader compares against it; build it with build.sh.
//
//	kubeconfig-go FILE
//	{"file":..,"server":..,"authorization":..,"client_cert":..,"ca":..,"server_name":..,"proxy":..,"impersonate":..}
//	{"file":..,"error":".."}   (any failure; the exit status is still 0)
//
// Secrets are never printed: tokens, passwords, certificates appear as the first 16 hex
// digits of their SHA-256. Nothing connects to the network: the request is answered by
// a capturing RoundTripper, and the real transport is only built to read its proxy.
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/net/http/httpguts"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
)

// result is printed with its keys in this order; nil pointers print as null.
type result struct {
	File          string  `json:"file"`
	Server        string  `json:"server"`
	Authorization *string `json:"authorization"`
	ClientCert    *string `json:"client_cert"`
	CA            string  `json:"ca"`
	ServerName    *string `json:"server_name"`
	Proxy         *string `json:"proxy"`
	Impersonate   *string `json:"impersonate"`
}

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: kubeconfig-go FILE")
		os.Exit(2)
	}
	file := os.Args[1]
	var out any
	func() {
		defer func() { // a panic in client-go is a finding too, not a crash of the test
			if p := recover(); p != nil {
				out = map[string]string{"file": filepath.Base(file), "error": fmt.Sprintf("panic: %v", p)}
			}
		}()
		if r, err := inspect(file); err != nil {
			out = struct {
				File  string `json:"file"`
				Error string `json:"error"`
			}{filepath.Base(file), err.Error()}
		} else {
			out = r
		}
	}()
	enc := json.NewEncoder(os.Stdout) // one line, with its newline
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func inspect(file string) (*result, error) {
	// 1. As the CCM: no --master. Only FILE is read ($KUBECONFIG is ignored with an
	// explicit path); relative paths in it are resolved against FILE's folder.
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		return nil, err
	}
	cfg.DisableCompression = true // as cloud-provider's options do (part of the transport cache key only)
	r := &result{File: filepath.Base(file), Impersonate: nonEmpty(cfg.Impersonate.UserName)}

	// 2. This runs exec.GetAuthenticator(...).UpdateTransportConfig: unless a token, basic
	// auth or a client certificate is configured (then exec is silently ignored), it adds
	// the exec RoundTripper with tc.Wrap and sets tc.TLS.GetCertHolder.
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, err
	}

	// 3. The request as the clientset's discovery makes it: the URL comes from
	// rest.DefaultServerUrlFor, which adds http:// or https:// to a server without scheme
	// (https only if a CA, a client certificate or insecure is set).
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	// The server as requests reach it: with the scheme client-go chose for it.
	r.Server = base.String()
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/version"
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	// transport.New ends with exactly this call on the real transport. It applies
	// tc.WrapTransport innermost (the exec RoundTripper), then bearer or basic auth, then
	// impersonation outermost; each auth layer leaves an Authorization header already set
	// alone, so token/tokenFile/basic always win over exec, and exec runs (here) only when
	// no outer layer set one.
	var sent http.Header
	rt, err := transport.HTTPWrappersForConfig(tc, roundTripFunc(func(req *http.Request) (*http.Response, error) {
		// As net/http's Transport does before sending: a token with a newline or other
		// control character fails the request.
		for k, vv := range req.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				return nil, fmt.Errorf("net/http: invalid header field name %q", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					return nil, fmt.Errorf("net/http: invalid header field value for %q", k)
				}
			}
		}
		sent = req.Header.Clone()
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}))
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if v := sent.Get("Authorization"); v != "" {
		scheme, rest, _ := strings.Cut(v, " ")
		r.Authorization = ptr(scheme + " " + short([]byte(rest)))
	}

	// 4. TLS. TLSConfigFor errors on CA + insecure, on CA data that holds no certificate,
	// and on a bad static cert/key pair; it reads CA, cert and key files into tc.TLS.
	tlsConf, err := transport.TLSConfigFor(tc)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil && tlsConf.GetClientCertificate != nil {
		// Static data first, then cert/key files (re-read at most once a second), then the
		// exec plugin's certificate; an empty tls.Certificate means none is sent.
		cert, err := tlsConf.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			return nil, err
		}
		if cert != nil && len(cert.Certificate) > 0 {
			r.ClientCert = ptr(short(cert.Certificate[0]))
		}
	} else if tlsConf != nil && len(tlsConf.Certificates) > 0 && len(tlsConf.Certificates[0].Certificate) > 0 {
		r.ClientCert = ptr(short(tlsConf.Certificates[0].Certificate[0]))
	}
	r.ServerName = nonEmpty(tc.TLS.ServerName)

	// 5. CA. No RootCAs means the system roots. A CA file that is empty gives (with the
	// ClientsAllowCARotation gate, on by default in 1.36) an EMPTY pool that trusts nothing,
	// not the system roots: reported as "empty".
	switch {
	case tc.TLS.Insecure:
		r.CA = "insecure"
	case tlsConf == nil || tlsConf.RootCAs == nil:
		r.CA = "system"
	default:
		r.CA = "empty"
		if der := firstCert(tc.TLS.CAData); der != nil {
			r.CA = short(der)
		}
	}

	// 6. Proxy: build the real transport and ask its http.Transport. Without TLS config,
	// dialer or proxy-url, client-go uses http.DefaultTransport (plain
	// http.ProxyFromEnvironment); otherwise its own http.Transport whose proxy is the
	// proxy-url (used for every host, NO_PROXY ignored) or, via SetTransportDefaults,
	// utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment).
	realRT, err := transport.New(tc)
	if err != nil {
		return nil, err
	}
	ht := httpTransport(realRT)
	if ht == nil {
		return nil, fmt.Errorf("kubeconfig-go: no *http.Transport under %T", realRT)
	}
	if ht.Proxy != nil {
		p, err := ht.Proxy(req)
		if err != nil {
			return nil, err
		}
		if p != nil {
			r.Proxy = ptr(proxyString(p))
		}
	}
	return r, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// httpTransport unwraps client-go's RoundTrippers down to the *http.Transport.
func httpTransport(rt http.RoundTripper) *http.Transport {
	for rt != nil {
		switch t := rt.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
	return nil
}

// firstCert is the DER of the first certificate x509.CertPool.AppendCertsFromPEM would
// add: PEM blocks of another type, with headers, or that don't parse are skipped.
func firstCert(data []byte) []byte {
	for len(data) > 0 {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return nil
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err == nil {
			return block.Bytes
		}
	}
	return nil
}

// proxyString is scheme://[user[:<hash of password>]@]host:port, the port made explicit
// as net/http dials it (http 80, https 443, socks5 1080) and the host lowercased.
func proxyString(p *url.URL) string {
	port := p.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[p.Scheme]
	}
	out := url.URL{Scheme: p.Scheme, Host: net.JoinHostPort(strings.ToLower(p.Hostname()), port)}
	if p.User != nil {
		if pw, ok := p.User.Password(); ok {
			out.User = url.UserPassword(p.User.Username(), short([]byte(pw)))
		} else {
			out.User = url.User(p.User.Username())
		}
	}
	return out.String()
}

func short(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func ptr(s string) *string { return &s }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
