package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// retryClassSub is the subscription of the retry-class runbook.
const retryClassSub = "app.BillingProjector"

// retryClassRunbook is docs/operations.md's "retry a class of failures":
// six entries parked by the billing outage (b-1 the youngest, b-6 the
// oldest), two billing ones parked a minute ago, two of another class.
// Between the two applies the owner resolves b-6 (retried at once) and a
// new billing entry parks: the second apply finds b-6 done and leaves the
// new one alone.
func retryClassRunbook() runbookDef {
	billing := "http POST http://billing: 503 Service Unavailable"
	requested := func(rb *rbEnv) map[string]string {
		rb.t.Helper()
		ps, err := redisstore.New(rb.c).ListParked(rb.ctx(), retryClassSub)
		if err != nil {
			rb.t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range ps {
			if p.Request != nil {
				out[p.Aggregate] = p.Request.Token
			}
		}
		return out
	}
	var planID string
	return runbookDef{
		setup: func(t *testing.T) *rbEnv {
			rb := standardRunbook(t)
			for i := 1; i <= 6; i++ {
				parkRedisEntry(t, rb.opsEnv, retryClassSub, fmt.Sprintf("b-%d", i), billing, time.Duration(i)*time.Hour)
			}
			for i := 1; i <= 2; i++ {
				parkRedisEntry(t, rb.opsEnv, retryClassSub, fmt.Sprintf("y-%d", i), billing, time.Minute)
				parkRedisEntry(t, rb.opsEnv, retryClassSub, fmt.Sprintf("v-%d", i), "validate: amount must be positive", 2*time.Hour)
			}
			return rb
		},
		steps: []rbStep{
			{cmd: "protctl parked ls --subscription app.BillingProjector --error-class 'http POST http://billing' --older-than 5m", check: func(rb *rbEnv, r result) {
				for i := 1; i <= 6; i++ {
					rb.wantRow(r, retryClassSub, fmt.Sprintf("b-%d", i), "shop::bill", fmt.Sprintf("b-%d", i), `\S+`, "parked", "3", `\S+`, "http POST http://billing: 503 Service Unavailable")
				}
				if strings.Contains(r.stdout, "y-1") || strings.Contains(r.stdout, "v-1") {
					rb.t.Errorf("the filter lists entries outside the class or too young:\n%s", r.stdout)
				}
			}},
			{cmd: "protctl parked retry --subscription app.BillingProjector --error-class 'http POST http://billing' --older-than 5m --dry-run -o json > retry.json", check: func(rb *rbEnv, r result) {
				var doc bulkDoc
				decode(rb.t, r.stdout, &doc)
				if doc.Selection == nil || doc.Selection.Count != 6 || len(doc.Items) != 6 || doc.Items[0].Target["aggregate"] != "b-6" {
					rb.t.Errorf("plan selection %+v, items %+v", doc.Selection, doc.Items)
				}
				planID = doc.ID
				if got := requested(rb); len(got) != 0 {
					rb.t.Errorf("the dry run requested %v", got)
				}
			}},
			{cmd: "protctl apply -f retry.json --rps 20 --max 3 --yes", code: 7, errOut: []string{"Selected 6 parked entries matching", "apply the plan again"},
				check: func(rb *rbEnv, r result) {
					for _, k := range []string{"b-6", "b-5", "b-4"} {
						rb.wantRow(r, "retry", retryClassSub+"/"+k, `.*`, "yes", "applied")
					}
					if got := requested(rb); len(got) != 3 || got["b-6"] != planID || got["b-4"] != planID {
						rb.t.Errorf("after the first run the requests are %v", got)
					}
				}},
			{cmd: "protctl apply -f retry.json --rps 20 --yes",
				before: func(rb *rbEnv) {
					// The owner retries b-6 and it succeeds; a new billing
					// entry parks.
					f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(retryClassSub, "b-6"), Token: "node-a:1"}
					if err := redisstore.New(rb.c).Resolve(context.Background(), f, retryClassSub, "b-6"); err != nil {
						rb.t.Fatal(err)
					}
					parkRedisEntry(rb.t, rb.opsEnv, retryClassSub, "b-new", billing, 3*time.Hour)
				},
				check: func(rb *rbEnv, r result) {
					for _, k := range []string{"b-6", "b-5", "b-4"} {
						rb.wantRow(r, "retry", retryClassSub+"/"+k, `.*`, "yes", "done")
					}
					for _, k := range []string{"b-3", "b-2", "b-1"} {
						rb.wantRow(r, "retry", retryClassSub+"/"+k, `.*`, "yes", "applied")
					}
					got := requested(rb)
					if len(got) != 5 || got["b-new"] != "" || got["b-1"] != planID {
						rb.t.Errorf("after the second run the requests are %v", got)
					}
				}},
			{cmd: "protctl parked ls --subscription app.BillingProjector --error-class 'http POST http://billing'", check: func(rb *rbEnv, r result) {
				rb.wantRow(r, retryClassSub, "b-5", "shop::bill", "b-5", `\S+`, `retrying \(retry requested\)`, "3")
				rb.wantRow(r, retryClassSub, "b-new", "shop::bill", "b-new", `\S+`, "parked", "3")
			}},
		},
	}
}
