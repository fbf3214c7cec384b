package webhooks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// judgementCounter counts, by the pool's queue (a namespace), the
// requests that reached the validator pool and those it answered.
type judgementCounter struct {
	mu                sync.Mutex
	entered, answered map[string]int
}

func newJudgementCounter() *judgementCounter {
	return &judgementCounter{entered: map[string]int{}, answered: map[string]int{}}
}

func (c *judgementCounter) counts(queue string) (entered, answered int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entered[queue], c.answered[queue]
}

// countingValidator is the pool, counting what passes through it.
type countingValidator struct {
	validatorpool.Validator
	counter *judgementCounter
}

func (v countingValidator) Validate(ctx context.Context, version string, req validatorpool.Request) (*validatorpool.Result, error) {
	v.counter.mu.Lock()
	v.counter.entered[req.Queue]++
	v.counter.mu.Unlock()
	defer func() {
		v.counter.mu.Lock()
		v.counter.answered[req.Queue]++
		v.counter.mu.Unlock()
	}()
	return v.Validator.Validate(ctx, version, req)
}

// floodSize is how many wrong specs the flooding namespace sends at once.
// Each is a judgement of its own by a real validator process (see the
// test), which then starts the next process: on the 2-core machine, with
// the webhook rendering the flood meanwhile, the pool judged about 60 of
// them in the 12 s the flood lasted (the others refused when the webhook's
// 8 s budget ran out, webhookBudget). In one line, the neighbour's spec
// would wait behind them all: several budgets.
const floodSize = 200

// A namespace that floods admission with wrong specs holds the validators
// for itself, but another namespace's valid spec waits for a turn of them,
// not for the whole flood: it is admitted, while most of the flood still
// waits. Without the pool's queue per namespace, it would wait behind every
// one of the flood and be refused when the webhook's budget runs out.
//
// The flood is real: each spec sets --goaway-chance to a value of its own
// above kube-apiserver's 0.02, which only kube-apiserver's own Validate
// refuses (the catalog checks the type, a float), so that each is judged
// by a validator process: no judgement is remembered for another spec,
// and a refusal is never shared with an equivalent one (docs/admission.md,
// "Shortcuts for a fleet").
func TestApiServerConfigValidator_AFloodOfWrongSpecsDoesNotRefuseAnotherNamespacesSpec(t *testing.T) {
	ctx := context.Background()
	flooder := testNamespace(t, "flooder-")
	neighbour := testNamespace(t, "neighbour-")
	// No client-side rate limit: the flood reaches kube-apiserver at once.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	floodErrs := make([]error, floodSize)
	var flood sync.WaitGroup
	for i := range floodSize {
		flood.Go(func() {
			floodErrs[i] = c.Create(ctx, newConfig(flooder, fmt.Sprintf("wrong-%03d", i), func(s *v1alpha1.ApiServerConfigSpec) {
				s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "goaway-chance", Value: fmt.Sprintf("0.5%03d", i)}}
			}))
		})
	}
	// The whole flood is at the pool (judged or waiting) before the
	// neighbour's spec comes.
	start := time.Now()
	deadline := start.Add(time.Minute)
	for {
		entered, _ := judgements.counts(flooder)
		if entered >= floodSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of the %d wrong specs reached the validators within a minute", entered, floodSize)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, answeredBefore := judgements.counts(flooder)
	t.Logf("The flood reached the validators in %v, %d of it answered", time.Since(start), answeredBefore)

	sent := time.Now()
	err = c.Create(ctx, newConfig(neighbour, "valid", func(*v1alpha1.ApiServerConfigSpec) {}))
	_, answeredMeanwhile := judgements.counts(flooder)
	t.Logf("The neighbour's spec was answered in %v, %d of the flood answered by then", time.Since(sent), answeredMeanwhile)
	flood.Wait()
	t.Logf("The flood was answered in %v", time.Since(start))
	if err != nil {
		t.Fatalf("the neighbour's valid spec was refused while another namespace flooded the validators: %v", err)
	}
	if answeredMeanwhile > floodSize/2 {
		t.Errorf("the neighbour's spec was admitted only after %d of the %d wrong specs queued before it: it did not overtake them", answeredMeanwhile, floodSize)
	}

	// Every wrong spec was refused, and the ones the validators reached
	// were refused for their value.
	judged, timedOut := 0, 0
	for i, err := range floodErrs {
		switch {
		case err == nil:
			t.Errorf("the wrong spec wrong-%03d was admitted", i)
		case !apierrors.IsInvalid(err):
			t.Errorf("the wrong spec wrong-%03d was refused, but not as Invalid: %v", i, err)
		case strings.Contains(err.Error(), "spec.extraArgs[0].value") && strings.Contains(err.Error(), "would refuse to start"):
			judged++
		default:
			timedOut++
		}
	}
	t.Logf("%d wrong specs refused by kube-apiserver's code, %d for want of a validator in time", judged, timedOut)
	if judged < validatorpool.Concurrency() {
		t.Errorf("only %d of the flood were refused by kube-apiserver's code: the validators were not kept busy", judged)
	}
}
