// Package validatorpool asks the bundled kube-apiserver's own code whether it
// would start with a command line and its files. The judge is the
// validator command of the bundled module (apiserver/bundled/cmd/validator),
// built for each bundled version as kube-apiserver-validator-<version>: it
// parses the flags with kube-apiserver's flag sets and runs its Complete,
// Validate and configuration building, without listening and without
// contacting etcd.
//
// kube-apiserver keeps feature gates in process-global state that can be set
// once, so a validator process judges one request and exits. Starting one
// costs about as much as kube-apiserver's package initialisation; Pool keeps
// one started process waiting per version so that a request pays only for
// the judging.
//
// Two shortcuts keep a fleet's burst of specs fast, each shown by a test
// with the real validators not to change a verdict: the loopback
// certificate that every kube-apiserver start-up generates is generated
// once per Pool and version, by that version's code, and supplied to its
// validators (see the validator's supplyLoopback), and requests that differ only in values
// kube-apiserver's start-up does not judge share an acceptance (see
// Equivalent). Exact turns both off.
package validatorpool

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// BinaryPrefix names the validator binaries: BinaryPrefix + version.
const BinaryPrefix = "kube-apiserver-validator-"

// Request is a command line as the pod runs it and the files the pod has.
type Request struct {
	// Args are the flags, --name=value.
	Args []string `json:"args"`
	// Files are the pod's files by their absolute path in the pod.
	Files map[string][]byte `json:"files"`
	// Env is the pod's environment, for $(VAR) references in Args.
	Env map[string]string `json:"env,omitempty"`
	// Queue is whose request it is (a namespace): when requests wait for
	// a validator, the queues take turns, so that a stream of requests
	// from one queue delays another's by a turn at most. Not judged.
	Queue string `json:"-"`
}

// Problem is one reason kube-apiserver would refuse to start.
type Problem struct {
	// Flags are the flags the problem concerns, as far as the validator
	// can tell (named in the message or known from the failing stage).
	Flags []string `json:"flags,omitempty"`
	// Message is kube-apiserver's own error.
	Message string `json:"message"`
}

// Result is the judgement of one Request.
type Result struct {
	// Version is the kube-apiserver version that judged.
	Version  string    `json:"version"`
	Problems []Problem `json:"problems,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
	// SuppliedLoopback says whether the validator's start-up took the
	// loopback certificate supplied ahead (never for an Exact Pool).
	SuppliedLoopback bool `json:"suppliedLoopback,omitempty"`
}

// Validator judges requests for kube-apiserver versions.
type Validator interface {
	// Validate judges req with the code of kube-apiserver version. An
	// error means no judgement was made (no validator for that version,
	// or it did not answer): callers must not treat that as acceptance.
	Validate(ctx context.Context, version string, req Request) (*Result, error)
	// Has reports whether there is a validator for version.
	Has(version string) bool
}

// ErrNoValidator is returned for a version that has no validator binary.
var ErrNoValidator = errors.New("no validator for this kube-apiserver version")

// Timeout bounds one judgement when the caller's context has no deadline.
const Timeout = 20 * time.Second

// Pool runs validator processes from the binaries in one directory.
type Pool struct {
	dir   string
	exact bool

	mu sync.Mutex
	// waiting holds one started process per version, ready for a request.
	waiting map[string]*process
	closed  bool
	// running counts the processes started and not yet gone with their
	// files: Close waits for them.
	running sync.WaitGroup
	// flights are the judgements under way by equivalence class: a
	// request of the same class waits for the one under way rather than
	// starting its own.
	flights map[string]*flight

	// answers remembers recent judgements: the same request (the same
	// spec, applied again by a GitOps tool's sync or dry run) is answered
	// without a process.
	answers *answerCache
	// accepted remembers recent acceptances by equivalence class: a
	// fleet's specs that differ only in their etcd servers and prefix
	// share one judgement.
	accepted *answerCache

	// loopback has, by version, the file of the loopback certificate
	// supplied to its validators (see loopbackFile), in loopbackDir.
	loopback    map[string]func() string
	loopbackDir string
	// workDir holds the validators' files (see WorkDir); ownWorkDir: the
	// pool made it, and removes it when it closes.
	workDir    string
	ownWorkDir bool

	// busy bounds the processes judging at once: each takes about 100 MiB
	// and a core while it judges; more requests wait their turn, queue by
	// queue.
	busy *fairSlots
}

// flight is one judgement under way; res is set (when it succeeded) before
// done is closed.
type flight struct {
	done chan struct{}
	res  *Result
}

// Concurrency is how many validator processes judge at once: one per CPU
// the operator may use (GOMAXPROCS follows the container's CPU limit), at
// least 2 and at most MaxConcurrency, each taking about 100 MiB while it
// judges.
func Concurrency() int { return min(MaxConcurrency, max(2, runtime.GOMAXPROCS(0))) }

// MaxConcurrency bounds Concurrency within the webhook container's 512 MiB
// (config/manager): about 100 MiB each, beside the webhook's own.
const MaxConcurrency = 3

// answersKept is how many judgements each of the Pool's memories keeps:
// a result is a few hundred bytes, a key 64.
const answersKept = 4096

// Option changes how a Pool judges.
type Option func(*Pool)

// Exact makes every judgement run upstream's start-up exactly as the pod
// does: no supplied keys, no acceptance shared between equivalent
// requests (only the same request is answered from memory). The tests that
// show the shortcuts change no verdict judge with it.
func Exact() Option { return func(p *Pool) { p.exact = true } }

// WorkDir is the pool's own directory, which holds each validator's
// temporary files (the pod's files it judges) and the supplied loopback
// certificate. It is emptied when the pool starts, of what an earlier
// process left when it was killed; a validator's files go when it ends,
// even when it was killed. Without it, the pool makes a directory of its
// own under the system's temporary directory.
func WorkDir(dir string) Option { return func(p *Pool) { p.workDir = dir } }

// NewPool serves the validators found in dir (files named
// kube-apiserver-validator-<version>). Nothing is started until Warm or the
// first request.
func NewPool(dir string, opts ...Option) *Pool {
	p := &Pool{dir: dir, waiting: map[string]*process{}, flights: map[string]*flight{}, loopback: map[string]func() string{},
		busy: newFairSlots(Concurrency()), answers: newAnswerCache(answersKept), accepted: newAnswerCache(answersKept)}
	for _, o := range opts {
		o(p)
	}
	if p.workDir != "" {
		_ = os.RemoveAll(p.workDir)
		if err := os.MkdirAll(p.workDir, 0o700); err != nil {
			p.workDir = "" // each validator makes its own files where the system keeps temporary ones
		}
	} else if d, err := os.MkdirTemp("", "kube-apiserver-validators-"); err == nil {
		p.workDir, p.ownWorkDir = d, true
	}
	return p
}

// loopbackFile is the file of the loopback certificate and key that
// version's validators are supplied with, generated once by that
// validator's own code into a directory only this user can read; "" when
// it could not be (each validator then generates its own while it waits).
// They are throwaway: they sign nothing outside a validator, which never
// listens.
func (p *Pool) loopbackFile(version string) string {
	p.mu.Lock()
	f, ok := p.loopback[version]
	if !ok {
		f = sync.OnceValue(func() string { return p.generateLoopback(version) })
		p.loopback[version] = f
	}
	p.mu.Unlock()
	return f()
}

func (p *Pool) generateLoopback(version string) string {
	out, err := exec.Command(p.binary(version), "--generate-loopback-cert-key").Output() //nolint:gosec // G204: the validator of a version in the operator's own --validator-dir
	if err != nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ""
	}
	if p.loopbackDir == "" {
		if p.loopbackDir, err = os.MkdirTemp(p.workDir, "loopback-"); err != nil {
			p.loopbackDir = ""
			return ""
		}
	}
	path := filepath.Join(p.loopbackDir, "loopback-"+filepath.Base(version)+".pem")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return ""
	}
	return path
}

// env is the environment of a validator process of version.
func (p *Pool) env(version string) []string {
	// Only what the validator needs: it sets its own proxy variables so
	// that nothing reaches the network. A validator lives for one
	// judgement, about 100 MiB either way: it does not collect garbage
	// (a fifth of its time, measured).
	env := []string{"HOME=" + os.TempDir(), "TMPDIR=" + os.TempDir(), "GOGC=off"}
	if p.exact {
		return append(env, "KUBE_APISERVER_VALIDATOR_EXACT=1")
	}
	if path := p.loopbackFile(version); path != "" {
		env = append(env, "KUBE_APISERVER_VALIDATOR_LOOPBACK="+path)
	}
	return env
}

// Versions are the versions that have a validator in the pool's directory.
func (p *Pool) Versions() []string {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if v, ok := strings.CutPrefix(e.Name(), BinaryPrefix); ok && !e.IsDir() {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// Has reports whether there is a validator for version.
func (p *Pool) Has(version string) bool {
	info, err := os.Stat(p.binary(version))
	return err == nil && !info.IsDir()
}

func (p *Pool) binary(version string) string {
	return filepath.Join(p.dir, BinaryPrefix+filepath.Base(version))
}

// Warm starts a waiting process for every version, so that the first
// requests do not pay the start-up.
func (p *Pool) Warm() {
	for _, v := range p.Versions() {
		p.refill(v)
	}
}

// Close stops the waiting processes, and returns once every process the
// pool started is gone with its files.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	waiting := p.waiting
	p.waiting = map[string]*process{}
	p.mu.Unlock()
	for _, proc := range waiting {
		proc.kill()
	}
	p.running.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loopbackDir != "" {
		_ = os.RemoveAll(p.loopbackDir)
	}
	if p.ownWorkDir {
		_ = os.RemoveAll(p.workDir)
	}
}

// errClosed: a closed pool starts no process.
var errClosed = errors.New("the validator pool is closed")

// start starts a validator of version, counted in running until it is gone
// with its files.
func (p *Pool) start(version string) (*process, error) {
	env := p.env(version)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	p.running.Add(1)
	p.mu.Unlock()
	proc, err := start(p.binary(version), env, p.workDir)
	if err != nil {
		p.running.Done()
		return nil, err
	}
	go func() {
		<-proc.exited
		p.running.Done()
	}()
	return proc, nil
}

// Validate judges req with kube-apiserver version's code: from memory when
// the same request, or an equivalent one that was accepted, was judged
// lately; else by the waiting process (or a new one), after which the next
// one starts in the background.
func (p *Pool) Validate(ctx context.Context, version string, req Request) (*Result, error) {
	if !p.Has(version) {
		return nil, fmt.Errorf("%w: %s (looked for %s)", ErrNoValidator, version, p.binary(version))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout)
		defer cancel()
	}
	key, err := cacheKey(version, req)
	if err != nil {
		return nil, err
	}
	if res, ok := p.answers.get(key); ok {
		return res, nil
	}
	if p.exact {
		return p.judge(ctx, version, req, key, "")
	}
	class, ok := Equivalent(req)
	if !ok {
		return p.judge(ctx, version, req, key, "")
	}
	classKey, err := cacheKey(version, class)
	if err != nil {
		return nil, err
	}
	if res, ok := p.accepted.get(classKey); ok {
		return res, nil
	}
	// One judgement per class at a time: the others wait for its verdict,
	// and are judged on their own only if it was a refusal (its messages
	// are about its own values) or it did not finish.
	p.mu.Lock()
	f, underway := p.flights[classKey]
	if !underway {
		f = &flight{done: make(chan struct{})}
		p.flights[classKey] = f
	}
	p.mu.Unlock()
	if underway {
		select {
		case <-f.done:
			if f.res != nil && len(f.res.Problems) == 0 {
				return f.res, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the judgement of an equivalent spec: %w", ctx.Err())
		}
		return p.judge(ctx, version, req, key, classKey)
	}
	res, err := p.judge(ctx, version, req, key, classKey)
	f.res = res
	p.mu.Lock()
	delete(p.flights, classKey)
	p.mu.Unlock()
	close(f.done)
	return res, err
}

// judge has a process judge req, and remembers the answer under key and,
// if it is an acceptance, under classKey (unless empty).
func (p *Pool) judge(ctx context.Context, version string, req Request, key, classKey string) (*Result, error) {
	if err := p.busy.acquire(ctx, req.Queue); err != nil {
		return nil, fmt.Errorf("waiting for a free validator (%d judge at once): %w", p.busy.size, err)
	}
	defer p.busy.release()
	p.mu.Lock()
	proc := p.waiting[version]
	delete(p.waiting, version)
	closed := p.closed
	p.mu.Unlock()
	if proc == nil {
		var err error
		if proc, err = p.start(version); err != nil {
			return nil, err
		}
	}
	res, err := proc.judge(ctx, req)
	if err == nil {
		p.answers.put(key, res)
		if classKey != "" && len(res.Problems) == 0 {
			p.accepted.put(classKey, res)
		}
	}
	// The next process starts once this one is done, so that its start-up
	// does not compete with the judging for CPU.
	if !closed {
		go p.refill(version)
	}
	return res, err
}

// refill starts the next waiting process for version, unless one is there.
func (p *Pool) refill(version string) {
	p.mu.Lock()
	there := p.closed || p.waiting[version] != nil
	p.mu.Unlock()
	if there {
		return
	}
	next, err := p.start(version)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.waiting[version] != nil {
		next.kill()
		return
	}
	p.waiting[version] = next
}

// process is one started validator, waiting for its request.
type process struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	stdoutFile *os.File
	stdout     *bufio.Reader
	stderr     *limitedBuffer
	// exited is closed once the process has exited and its output is
	// read.
	exited chan struct{}
	// ready is closed once the process printed "ready" (or failed to).
	ready    chan struct{}
	readyErr error
}

// start starts a validator of binary; its temporary files go in a
// directory of its own under workDir (unless empty), removed once it
// exited.
func start(binary string, env []string, workDir string) (*process, error) {
	cmd := exec.Command(binary)
	cmd.Env = env
	// Once it exited (or was killed), its output is not waited for long,
	// should anything it started hold it open.
	cmd.WaitDelay = time.Second
	var tmp string
	if workDir != "" {
		var err error
		if tmp, err = os.MkdirTemp(workDir, "validator-"); err != nil {
			return nil, fmt.Errorf("starting the validator %s: %w", binary, err)
		}
		// The last value of a variable is the one the process sees.
		cmd.Env = append(slices.Clip(env), "TMPDIR="+tmp, "HOME="+tmp)
	}
	removeTmp := func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		removeTmp()
		return nil, fmt.Errorf("starting the validator %s: %w", binary, err)
	}
	// A pipe of our own rather than StdoutPipe, so that reaping the
	// process never closes it under a reader.
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		removeTmp()
		return nil, fmt.Errorf("starting the validator %s: %w", binary, err)
	}
	cmd.Stdout = stdoutW
	stderr := &limitedBuffer{max: 64 << 10}
	cmd.Stderr = stderr
	err = cmd.Start()
	_ = stdoutW.Close()
	if err != nil {
		_ = stdoutR.Close()
		removeTmp()
		return nil, fmt.Errorf("starting the validator %s: %w", binary, err)
	}
	p := &process{cmd: cmd, stdin: stdin, stdoutFile: stdoutR, stdout: bufio.NewReader(stdoutR), stderr: stderr,
		exited: make(chan struct{}), ready: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		removeTmp() // answered, failed or killed: its files go
		close(p.exited)
	}()
	go func() {
		defer close(p.ready)
		line, err := p.stdout.ReadString('\n')
		switch {
		case err != nil:
			p.readyErr = fmt.Errorf("the validator %s did not start: %q: %w", binary, line, err)
		case strings.TrimSpace(line) != "ready":
			p.readyErr = fmt.Errorf("the validator %s did not start: %q", binary, line)
		}
	}()
	return p, nil
}

// judge sends req and reads the result; the process exits after it.
func (p *process) judge(ctx context.Context, req Request) (*Result, error) {
	defer p.kill()
	select {
	case <-p.ready:
		if p.readyErr != nil {
			return nil, p.readyErr
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the validator to start: %w", ctx.Err())
	}
	type answer struct {
		res *Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		if err := json.NewEncoder(p.stdin).Encode(req); err != nil {
			done <- answer{err: fmt.Errorf("sending the request to the validator: %w", err)}
			return
		}
		_ = p.stdin.Close()
		var res Result
		if err := json.NewDecoder(p.stdout).Decode(&res); err != nil {
			<-p.exited
			done <- answer{err: fmt.Errorf("reading the validator's answer: %w (its last output: %s)", err, tail(p.stderr.String(), 400))}
			return
		}
		done <- answer{res: &res}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the validator's answer: %w", ctx.Err())
	}
}

// kill ends the process (it is reaped by the goroutine that waits for it).
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.stdoutFile.Close()
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// cacheKey identifies a request: the version and every byte of it.
func cacheKey(version string, req Request) (string, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encoding the validation request: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(version))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// answerCache keeps the last judgements, the oldest dropped first.
type answerCache struct {
	mu    sync.Mutex
	max   int
	order []string
	m     map[string]*Result
}

func newAnswerCache(size int) *answerCache {
	return &answerCache{max: size, m: map[string]*Result{}}
}

func (c *answerCache) get(key string) (*Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[key]
	return r, ok
}

func (c *answerCache) put(key string, r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, key)
	c.m[key] = r
}
