package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// LoadResult is what one load run saw.
type LoadResult struct {
	Requests   int            `json:"requests"`
	Seconds    float64        `json:"seconds"`
	Throughput float64        `json:"throughput"` // expected answers per second
	Latency    Latencies      `json:"latency"`
	Statuses   map[string]int `json:"statuses"`
	// Errors are unexpected answers and transport errors; Examples holds
	// the first few, to say what went wrong.
	Errors   int      `json:"errors"`
	Examples []string `json:"error_examples,omitempty"`
	// Sampled are the latencies of the requests the caller marked (the
	// Prefer: wait ones of the settle-latency phase).
	Sampled *Latencies `json:"sampled,omitempty"`
}

// ErrorRate is the share of requests that were errors.
func (r LoadResult) ErrorRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Errors) / float64(r.Requests)
}

// request is one request to send: the seq-th of a run.
type request struct {
	build func(seq int64) (*http.Request, error)
	// expect says whether an answer is the one the measurement is about.
	expect func(*http.Response) bool
	// sample marks requests whose latencies are also kept apart.
	sample func(seq int64) bool
}

// newHTTPClient keeps one idle connection per concurrent client, so that a
// closed loop never opens a connection after its first requests: the
// measurement is of the service, not of TCP handshakes.
func newHTTPClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns
	t.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// recorder is one sender's record, kept apart from the others' so that no
// lock is taken per request; the slices are allocated before the clock
// starts.
type recorder struct {
	lat, sampled []time.Duration
	statuses     map[int]int
	errors       int
	examples     []string
}

func newRecorder(capacity int) *recorder {
	return &recorder{lat: make([]time.Duration, 0, capacity), statuses: map[int]int{}}
}

func (rec *recorder) do(client *http.Client, req request, seq int64, start time.Time) {
	r, err := req.build(seq)
	if err != nil {
		rec.fail(err.Error())
		return
	}
	resp, err := client.Do(r)
	if err != nil {
		rec.fail(err.Error())
		return
	}
	// Read the whole body: the connection goes back to the pool only then.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	took := time.Since(start)
	rec.statuses[resp.StatusCode]++
	if !req.expect(resp) {
		rec.fail(fmt.Sprintf("%s %s: %d %.200s", r.Method, r.URL.Path, resp.StatusCode, body))
		return
	}
	rec.lat = append(rec.lat, took)
	if req.sample != nil && req.sample(seq) {
		rec.sampled = append(rec.sampled, took)
	}
}

func (rec *recorder) fail(what string) {
	rec.errors++
	if len(rec.examples) < 3 {
		rec.examples = append(rec.examples, what)
	}
}

func merge(recs []*recorder, elapsed time.Duration) LoadResult {
	res := LoadResult{Seconds: elapsed.Seconds(), Statuses: map[string]int{}}
	var lat, sampled []time.Duration
	for _, rec := range recs {
		lat = append(lat, rec.lat...)
		sampled = append(sampled, rec.sampled...)
		res.Errors += rec.errors
		for status, n := range rec.statuses {
			res.Statuses[fmt.Sprint(status)] += n
		}
		for _, e := range rec.examples {
			if len(res.Examples) < 5 {
				res.Examples = append(res.Examples, e)
			}
		}
	}
	res.Requests = len(lat) + res.Errors
	res.Throughput = float64(len(lat)) / elapsed.Seconds()
	res.Latency = Summarize(lat)
	if len(sampled) > 0 {
		s := Summarize(sampled)
		res.Sampled = &s
	}
	return res
}

// closedLoop runs clients senders, each sending its next request as soon
// as the previous is answered, for d or until limit requests (if
// positive) have been sent.
func closedLoop(ctx context.Context, client *http.Client, clients int, d time.Duration, limit int64, req request) LoadResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var seq atomic.Int64
	recs := make([]*recorder, clients)
	for i := range recs {
		recs[i] = newRecorder(1 << 15)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, rec := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := seq.Add(1)
				if limit > 0 && n > limit {
					return
				}
				rec.do(client, req, n, time.Now())
			}
		}()
	}
	wg.Wait()
	return merge(recs, time.Since(start))
}

// openLoop sends at rate requests per second for d, whatever the answers'
// latency: each request is sent at its scheduled time and its latency
// counts from then, so a slow answer does not delay (and hide) the ones
// behind it. At most maxInFlight are outstanding; one that finds them all
// taken is counted as an error.
func openLoop(ctx context.Context, client *http.Client, rate float64, d time.Duration, maxInFlight int, req request) LoadResult {
	total := int64(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	slots := make(chan *recorder, maxInFlight)
	recs := make([]*recorder, maxInFlight)
	for i := range recs {
		recs[i] = newRecorder(int(total)/maxInFlight + 64)
		slots <- recs[i]
	}
	var wg sync.WaitGroup
	start := time.Now()
	var overflow recorder
	overflow.statuses = map[int]int{}
	for n := int64(1); n <= total && ctx.Err() == nil; n++ {
		at := start.Add(time.Duration(n-1) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case rec := <-slots:
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec.do(client, req, n, at)
				slots <- rec
			}()
		default:
			overflow.fail(fmt.Sprintf("more than %d requests outstanding", maxInFlight))
		}
	}
	sent := time.Since(start)
	wg.Wait()
	// The rate is over the sending, not over the wait for the last
	// answers (a Prefer: wait one can take seconds).
	return merge(append(recs, &overflow), sent)
}
