// goserver is the Go net/http e2e server: SSE written with http.Flusher, stdlib only.
// It implements the contract in ../README.md (the same API as common.py's servers).
//
// Usage: goserver PORT [--tls-cert PEM]  (or --port PORT; 0 picks a free port). With --tls-cert
// (certificate and key in one file) it serves TLS with crypto/tls (http.ServeTLS), which also
// offers HTTP/2 through ALPN.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	defaultMaxTokens = 16
	defaultTokenMs   = 5.0
	defaultPrefillMs = 20.0
	chatPath         = "/v1/chat/completions"
)

var nextID atomic.Int64

type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	MaxTokens     int    `json:"max_tokens"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	TokenMs   *float64 `json:"x_token_ms"`
	PrefillMs *float64 `json:"x_prefill_ms"`
	Fail      string   `json:"x_fail"`
	Messages  []struct {
		Content any `json:"content"`
	} `json:"messages"`
	Prompt any `json:"prompt"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Delta        *delta  `json:"delta,omitempty"`
	Message      *delta  `json:"message,omitempty"`
	FinishReason *string `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

var errorBody = map[string]any{
	"error": map[string]any{"message": "injected", "type": "server_error", "code": 500},
}

func strp(s string) *string { return &s }

func tokenText(i int) string { return "tok" + strconv.Itoa(i) + " " }

func words(v any) int {
	if s, ok := v.(string); ok {
		return len(strings.Fields(s))
	}
	return 0
}

func promptTokens(r *request) int {
	n := words(r.Prompt)
	for _, m := range r.Messages {
		n += words(m.Content)
	}
	if n < 1 {
		n = 1
	}
	return n
}

func ms(v *float64, def float64) time.Duration {
	if v != nil {
		def = *v
	}
	return time.Duration(def * float64(time.Millisecond))
}

// sleep waits d, or returns false when the client went away first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func chat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": map[string]any{
			"message": "POST only", "type": "invalid_request_error", "code": 405}})
		return
	}
	body, err := io.ReadAll(r.Body)
	var req request
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": err.Error(), "type": "invalid_request_error", "code": 400}})
		return
	}
	if req.Model == "" {
		req.Model = "e2e-model"
	}
	if req.MaxTokens <= 0 {
		req.MaxTokens = defaultMaxTokens
	}
	if req.Fail == "http" {
		writeJSON(w, http.StatusInternalServerError, errorBody)
		return
	}
	tokenDelay, prefill := ms(req.TokenMs, defaultTokenMs), ms(req.PrefillMs, defaultPrefillMs)
	pt := promptTokens(&req)
	u := &usage{pt, req.MaxTokens, pt + req.MaxTokens}
	c := chunk{
		ID:      fmt.Sprintf("chatcmpl-%d", nextID.Add(1)),
		Object:  "chat.completion.chunk",
		Created: time.Now().Unix(),
		Model:   req.Model,
	}
	ctx := r.Context()

	if !req.Stream {
		if !sleep(ctx, prefill+tokenDelay*time.Duration(req.MaxTokens-1)) {
			return
		}
		var text strings.Builder
		for i := 0; i < req.MaxTokens; i++ {
			text.WriteString(tokenText(i))
		}
		c.Object = "chat.completion"
		c.Choices = []choice{{Message: &delta{Role: "assistant", Content: strp(text.String())},
			FinishReason: strp("length")}}
		c.Usage = u
		writeJSON(w, http.StatusOK, c)
		return
	}

	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no flusher", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	done := func() {
		io.WriteString(w, "data: [DONE]\n\n")
		flusher.Flush()
	}
	frame := func(d *delta, finish *string) bool {
		c.Choices = []choice{{Delta: d, FinishReason: finish}}
		return send(c)
	}

	if !frame(&delta{Role: "assistant", Content: strp("")}, nil) || !sleep(ctx, prefill) {
		return
	}
	for i := 0; i < req.MaxTokens; i++ {
		if req.Fail == "stream" && i == req.MaxTokens/2 {
			send(errorBody)
			done()
			return
		}
		if i > 0 && !sleep(ctx, tokenDelay) {
			return
		}
		if !frame(&delta{Content: strp(tokenText(i))}, nil) {
			return
		}
	}
	if !frame(&delta{}, strp("length")) {
		return
	}
	if req.StreamOptions.IncludeUsage {
		c.Choices = []choice{}
		c.Usage = u
		if !send(c) {
			return
		}
	}
	done()
}

func main() {
	args := os.Args[1:]
	pem := ""
	if len(args) >= 2 && args[len(args)-2] == "--tls-cert" {
		pem = args[len(args)-1]
		args = args[:len(args)-2]
	}
	if len(args) == 2 && args[0] == "--port" {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: goserver PORT | --port PORT [--tls-cert PEM]  (0 picks a free port)")
		os.Exit(2)
	}
	port, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver: bad port:", args[0])
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(chatPath, chat)
	fmt.Printf("listening on %s\n", ln.Addr())
	os.Stdout.Sync()
	if pem != "" {
		fmt.Fprintln(os.Stderr, http.ServeTLS(ln, mux, pem, pem))
	} else {
		fmt.Fprintln(os.Stderr, http.Serve(ln, mux))
	}
	os.Exit(1)
}
