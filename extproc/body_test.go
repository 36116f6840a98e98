package extproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseBody(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		body    string
		want    Body
		wantErr string
	}{
		{"completion with a string prompt", PathCompletions, `{"model":"m","prompt":"hi there"}`, Body{Model: "m", Prompt: "hi there"}, ""},
		{"completion with a list of strings routes on the first", PathCompletions, `{"model":"m","prompt":["a","b"]}`, Body{Model: "m", Prompt: "a"}, ""},
		{"completion with token ids", PathCompletions, `{"model":"m","prompt":[1,2,151643]}`, Body{Model: "m", Tokens: []uint32{1, 2, 151643}}, ""},
		{"completion with lists of ids routes on the first", PathCompletions, `{"model":"m","prompt":[[7,8],[9]]}`, Body{Model: "m", Tokens: []uint32{7, 8}}, ""},
		{"ids written as 1.0 are integers", PathCompletions, `{"model":"m","prompt":[1.0]}`, Body{Model: "m", Tokens: []uint32{1}}, ""},
		{"unknown fields are ignored", PathCompletions, `{"model":"m","prompt":"x","max_tokens":5,"stream":true}`, Body{Model: "m", Prompt: "x"}, ""},
		{"chat", PathChatCompletions, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, Body{Model: "m", Chat: true}, ""},
		{"another path needs only a model", "/v1/embeddings", `{"model":"m","input":"x"}`, Body{Model: "m"}, ""},
		{"empty body", PathCompletions, ``, Body{}, "body is empty"},
		{"not JSON", PathCompletions, `{"model":`, Body{}, "not valid JSON"},
		{"JSON but not an object", PathCompletions, `[1,2]`, Body{}, "not an object"},
		{"a top-level null is not an object", PathCompletions, " null\n", Body{}, "not an object"},
		{"no model", PathCompletions, `{"prompt":"x"}`, Body{}, "no \"model\""},
		{"model not a string", PathCompletions, `{"model":3,"prompt":"x"}`, Body{}, "non-empty string"},
		{"completions without prompt", PathCompletions, `{"model":"m"}`, Body{}, "needs \"prompt\""},
		{"prompt of the wrong type", PathCompletions, `{"model":"m","prompt":5}`, Body{}, "must be a string"},
		{"empty prompt list", PathCompletions, `{"model":"m","prompt":[]}`, Body{}, "empty list"},
		{"negative token id", PathCompletions, `{"model":"m","prompt":[1,-2]}`, Body{}, "position 1"},
		{"fractional token id", PathCompletions, `{"model":"m","prompt":[1.5]}`, Body{}, "position 0"},
		{"huge token id", PathCompletions, `{"model":"m","prompt":[99999999999]}`, Body{}, "position 0"},
		{"empty inner id list", PathCompletions, `{"model":"m","prompt":[[]]}`, Body{}, "non-empty list"},
		{"ids with spaces and an exponent", PathCompletions, `{"model":"m","prompt":[ 1 , 2e1 ,3 ]}`, Body{Model: "m", Tokens: []uint32{1, 20, 3}}, ""},
		{"largest id", PathCompletions, `{"model":"m","prompt":[4294967295]}`, Body{Model: "m", Tokens: []uint32{4294967295}}, ""},
		{"id just over 2^32-1", PathCompletions, `{"model":"m","prompt":[4294967296]}`, Body{}, "position 0"},
		{"a bad id followed by spaced elements", PathCompletions, `{"model":"m","prompt":[7000000000, 0, [1], "x"]}`, Body{}, "position 0 (7000000000)"},
		{"a bad id in a body that is not valid JSON after it", PathCompletions, `{"model":"m","prompt":[-1, ]}`, Body{}, "not valid JSON"},
		{"a string among ids", PathCompletions, `{"model":"m","prompt":[1,"a"]}`, Body{}, "position 1"},
		{"an id among strings", PathCompletions, `{"model":"m","prompt":["a",1]}`, Body{}, "not a mix"},
		{"null among ids", PathCompletions, `{"model":"m","prompt":[1,null]}`, Body{}, "position 1"},
		{"nested list among ids", PathCompletions, `{"model":"m","prompt":[1,[2]]}`, Body{}, "position 1"},
		{"inner list with a string", PathCompletions, `{"model":"m","prompt":[["a]"]]}`, Body{}, "position 0"},
		{"keys match case-insensitively", PathChatCompletions, `{"MODEL":"m","Messages":[1]}`, Body{Model: "m", Chat: true}, ""},
		{"keys match after unescaping", PathCompletions, `{"mod\u0065l":"m","pr\u006fmpt":"x"}`, Body{Model: "m", Prompt: "x"}, ""},
		{"a long s folds to s, as in encoding/json", PathChatCompletions, `{"model":"m","meſſages":[1]}`, Body{Model: "m", Chat: true}, ""},
		{"the last of a repeated key wins", PathCompletions, `{"model":"a","prompt":[1],"Model":"b","prompt":"x"}`, Body{Model: "b", Prompt: "x"}, ""},
		{"a repeated key's null wins too", PathCompletions, `{"model":"m","prompt":"x","prompt":null}`, Body{}, "needs \"prompt\""},
		{"strings decode escapes and invalid UTF-8", PathCompletions, "{\"model\":\"m\\u00e9\\ud83d\\ude00\\ud800\xff\",\"prompt\":\"\\n\"}", Body{Model: "mé😀\uFFFD\uFFFD", Prompt: "\n"}, ""},
		{"10,001 nested lists are refused as encoding/json does", PathCompletions, `{"model":"m","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, Body{}, "exceeded max depth"},
		{"10,000 nested containers are accepted", PathCompletions, `{"model":"m","prompt":"x","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, Body{Model: "m", Prompt: "x"}, ""},
		{"a cache_salt is kept", PathChatCompletions, `{"model":"m","messages":[1],"cache_salt":"tenant-a"}`, Body{Model: "m", Chat: true, CacheSalt: "tenant-a"}, ""},
		{"a null cache_salt is none", PathCompletions, `{"model":"m","prompt":"x","cache_salt":null}`, Body{Model: "m", Prompt: "x"}, ""},
		{"cache_salt matches case-insensitively, escapes decoded", PathCompletions, `{"model":"m","prompt":"x","Cache_Salt":"a\u00e9"}`, Body{Model: "m", Prompt: "x", CacheSalt: "aé"}, ""},
		{"an empty cache_salt is refused, as vLLM does", PathCompletions, `{"model":"m","prompt":"x","cache_salt":""}`, Body{}, "cache_salt"},
		{"a cache_salt not a string is refused", PathCompletions, `{"model":"m","prompt":"x","cache_salt":5}`, Body{}, "non-empty string when given"},
		{"chat without messages", PathChatCompletions, `{"model":"m"}`, Body{}, "needs \"messages\""},
		{"chat with empty messages", PathChatCompletions, `{"model":"m","messages":[]}`, Body{}, "is empty"},
		{"chat messages not a list", PathChatCompletions, `{"model":"m","messages":"hi"}`, Body{}, "must be a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBody(tt.path, []byte(tt.body))
			ref, refErr := referenceParseBody(tt.path, []byte(tt.body))
			if fmt.Sprint(err) != fmt.Sprint(refErr) || !reflect.DeepEqual(got, ref) {
				t.Fatalf("ParseBody = %+v, %v; the encoding/json parser says %+v, %v", got, err, ref, refErr)
			}
			if tt.wantErr != "" {
				var bad *BadRequestError
				if !errors.As(err, &bad) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a BadRequestError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseBody holds the one-pass parser to the encoding/json-based one it replaced: the
// same Body for every accepted body, the same error message for every refused one, and ids
// that encoding/json reads as the same numbers.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"x"}`, `{"model":"m","prompt":[[1,2]]}`, `{"model":"m","prompt":["a"]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`, `{"model":null}`, `[]`, `"x"`, `null`, `{"model":"m","prompt":[1e30]}`, `{"model":"m","prompt":[ 1 ,2.0, 3e0]}`, `{"model":"m","prompt":[[1,2],[3]]}`,
		`{"MODEL":"m","Prompt":[1],"prompt":"\u00e9\ud800x"}`, `{"mod\u0065l":"m","pr\u006fmpt":["a",null,1]}`, `{"model":"m","prompt":[[1,"]"]]}`,
		`{"model":"m","prompt":[-0, 0.5e1, 01]}`, `{"model":"m","messages":[ ],"x":{"a":[true,false,null]}}`, "{\"model\":\"\xff\",\"prompt\":\"\xe2\x82\"}",
		`{"model":"m","prompt":[4294967295, 10000000000e-5]}`, `{"model":"m"} x`, `{"model":"m",}`, `{"model":"m","prompt":[1,]}`,
		`{"model":"m","prompt":"x","cache_salt":"s"}`, `{"model":"m","CACHE_SALT":["s"]}`, `{"model":"m","cache_salt":""}`} {
		f.Add(PathCompletions, []byte(s))
		f.Add(PathChatCompletions, []byte(s))
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		b, err := ParseBody(path, body)
		// A stream's kept id array, of any size and dirty from an earlier request, changes
		// nothing (decision 1200).
		for _, n := range []int{1, len(body)/5 + 1, 4096} {
			used := make([]uint32, n)
			for i := range used {
				used[i] = 0xDEADBEEF
			}
			ub, uerr := parseBody(path, body, used)
			if (uerr == nil) != (err == nil) || (uerr != nil && uerr.Error() != err.Error()) || !reflect.DeepEqual(ub, b) {
				t.Fatalf("%q into a used array of %d: got %+v, %v; into none: %+v, %v", body, n, ub, uerr, b, err)
			}
		}
		want, wantErr := referenceParseBody(path, body)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%q: err = %v, the encoding/json parser says %v", body, err, wantErr)
		}
		if err != nil {
			var bad *BadRequestError
			if !errors.As(err, &bad) {
				t.Fatalf("error %v is not a BadRequestError", err)
			}
			return
		}
		if !reflect.DeepEqual(b, want) {
			t.Fatalf("%q: got %+v, the encoding/json parser says %+v", body, b, want)
		}
		if b.Model == "" {
			t.Fatalf("accepted a body without a model: %q", body)
		}
		if b.Tokens != nil {
			// The ids must be the numbers encoding/json reads.
			var ref struct{ Prompt []any }
			if err := json.Unmarshal(body, &ref); err != nil {
				t.Fatalf("accepted ids that encoding/json refuses: %q: %v", body, err)
			}
			list := ref.Prompt
			if inner, ok := list[0].([]any); ok {
				list = inner
			}
			if len(list) != len(b.Tokens) {
				t.Fatalf("%d ids, encoding/json sees %d: %q", len(b.Tokens), len(list), body)
			}
			for i := range b.Tokens {
				if f, ok := list[i].(float64); !ok || f != float64(b.Tokens[i]) {
					t.Fatalf("id %d = %d, encoding/json sees %v: %q", i, b.Tokens[i], list[i], body)
				}
			}
		}
	})
}

// BenchmarkParseBody measures ParseBody (one pass) beside the encoding/json parser it
// replaced, on 8 KiB bodies; MB/s is body bytes per second.
func BenchmarkParseBody(b *testing.B) {
	bodies := []struct{ name, body string }{
		{"ids-8KiB", idsBody(8192)},
		{"nested-ids-8KiB", strings.Replace(strings.Replace(idsBody(8190), `[`, `[[`, 1), `]`, `]]`, 1)},
		{"text-8KiB", textBody(8192)},
	}
	parsers := []struct {
		name  string
		parse func(string, []byte) (Body, error)
	}{{"onepass", ParseBody}, {"encoding-json", referenceParseBody}}
	for _, bb := range bodies {
		for _, p := range parsers {
			b.Run(bb.name+"/"+p.name, func(b *testing.B) {
				body := []byte(bb.body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.parse(PathCompletions, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// idsBody is a completions body of about n bytes whose prompt is token ids of 1 to 6
// digits, as a Qwen2.5 tokenizer produces (ids below 151,643).
func idsBody(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"model":"Qwen/Qwen2.5-3B-Instruct","max_tokens":16,"prompt":[`)
	x := uint32(12345)
	for i := 0; sb.Len() < n-2; i++ {
		x = x*1664525 + 1013904223
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(int(x % 151643)))
	}
	sb.WriteString("]}")
	return sb.String()
}

// textBody is a completions body of n bytes with a text prompt.
func textBody(n int) string {
	head := `{"model":"m","prompt":"`
	return head + strings.Repeat("lorem ipsum ", n/12)[:n-len(head)-2] + `"}`
}

// TestParseBodyIDsAgreeWithEncodingJSON runs ParseBody and the encoding/json parser over id
// lists at the edges of its one-pass id loop: every width from 1 to 11 digits, leading
// zeros, 2^32 and beyond, whitespace around the comma, and elements that are not ids.
func TestParseBodyIDsAgreeWithEncodingJSON(t *testing.T) {
	var lists []string
	for w := 1; w <= 11; w++ {
		id := strings.Repeat("7", w)
		lists = append(lists, id, id+","+id, "1,"+id+",2", "0"+id, "1, "+id+" ,\n"+id)
	}
	lists = append(lists, "4294967295,4294967296", "0,00", "12345678,1", "1234567,1", "-1,2", "1.0,2", "1e3,2", `1,"a"`, "9999999 ]")
	for _, l := range lists {
		for _, tail := range []string{"]}", `],"x":1}`, `],"model":"n"}`} {
			body := []byte(`{"model":"m","prompt":[` + l + tail)
			got, err := ParseBody(PathCompletions, body)
			want, wantErr := referenceParseBody(PathCompletions, body)
			if (err == nil) != (wantErr == nil) {
				t.Errorf("%s: err = %v, encoding/json parser %v", body, err, wantErr)
				continue
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %+v, encoding/json parser %+v", body, got, want)
			}
		}
	}
}
