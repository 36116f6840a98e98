package capture

import (
	"bytes"
	"math"
	"testing"
)

// FuzzParseDriver: any input either fails with an error or yields rows whose
// numbers are finite and non-negative and whose ok rows have a TTFT; never a
// panic.
func FuzzParseDriver(f *testing.F) {
	f.Add([]byte(goodSeed(1785960825.985649)))
	f.Add([]byte(goodHeader + "0,106,1785960825.98,0.09,1.65,1578,64,ok,,20.21;19.11;\n"))
	f.Add([]byte(goodHeader + "3,32,1785960895.96,,0.02,,,error,RuntimeError: HTTP 500: Internal Server Error,\n"))
	f.Add([]byte("itls_ms,error,status,completion_tokens,prompt_tokens,e2e_s,ttft_s,send_ts,prefix_id,index,extra\n1;2,,ok,1,1,1,1,1,1,1,x\n"))
	f.Add([]byte(goodHeader + "0,1,\"1\n\",1,1,1,1,ok,,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := parseDriver(bytes.NewReader(data), "fuzz.csv")
		if err != nil {
			return
		}
		if len(rows) == 0 {
			t.Fatal("no rows and no error")
		}
		for _, r := range rows {
			for _, v := range append([]float64{r.Send, r.TTFT, r.E2E}, r.ITLs...) {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("row %+v has a bad number %v", r, v)
				}
			}
			if r.Index < 0 || r.PrefixID < 0 || r.PromptTokens < 0 || r.CompletionTokens < 0 {
				t.Fatalf("row %+v has a negative count", r)
			}
		}
		_ = SeedMetrics(rows)
	})
}

// FuzzParseProm: any input either fails or yields engine series with
// matching, ascending timestamps and finite values, sorted by instance.
func FuzzParseProm(f *testing.F) {
	f.Add([]byte(promMatrix(1000, engine(engB, 1, 2), engine(engA, 3), router("x", 1))))
	f.Add([]byte(promMatrix(1000)))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a","le":"0.1"},"values":[[1.5,"NaN"]]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1,"1",3]]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, err := ParseQueryRange(data, "fuzz.json")
		if err != nil {
			return
		}
		for i, s := range ss {
			if len(s.T) != len(s.V) || len(s.T) == 0 || s.Instance == "" {
				t.Fatalf("series %d: %+v", i, s)
			}
			for j := range s.T {
				if math.IsNaN(s.V[j]) || math.IsInf(s.V[j], 0) || (j > 0 && s.T[j] <= s.T[j-1]) {
					t.Fatalf("series %d sample %d: %v %v", i, j, s.T[j], s.V[j])
				}
			}
			if i > 0 && ss[i-1].Instance > s.Instance {
				t.Fatalf("not sorted by instance: %q > %q", ss[i-1].Instance, s.Instance)
			}
		}
		if len(ss) >= 2 {
			_ = Imbalance(ss, math.Inf(-1), math.Inf(1))
		}
	})
}
