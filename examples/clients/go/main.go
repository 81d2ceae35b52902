// Command agentmesh-go-client calls agentmesh's DispatcherService from Go, with the stubs buf.gen.yaml
// generates (protoc-gen-go and protoc-gen-go-grpc):
//
//	agentmesh-go-client run -agent AGENT -goal "..." [-task-id ID] [-disconnect-after N] [-json]
//	agentmesh-go-client watch -task-id ID [-after N] [-json]
//	agentmesh-go-client agents [-json]
//
// `run` streams RunTask and prints each event; when the stream breaks (or -disconnect-after N drops
// it on purpose) it resumes with WatchTask(after_sequence = the last sequence printed), so every event
// is printed once, in order. A failed call prints its typed error: our agentmesh.v1.ErrorDetail and
// the standard google.rpc details (errors.go).
//
// Environment (deliberately not AGENTMESH_*: agentmesh's own configuration owns that prefix):
// AM_EXAMPLE_DISPATCHER (host:port, default 127.0.0.1:50051) and AM_EXAMPLE_TOKEN (a signed identity
// token, sent as x-agentmesh-identity; `agentmesh token --role operator` prints one).
//
// Exit codes: 0 success (task SUCCEEDED, or the call answered), 1 the task did not succeed, 2 bad
// usage, 3 a call failed (its typed error is printed).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/gen/go/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	identityHeader  = "x-agentmesh-identity"
	requestIDHeader = "x-request-id"
	maxResumes      = 5
)

var errUsage = errors.New("usage")

// client holds one connection and what every call sends: the token and one request id.
type client struct {
	stub      agentmeshv1.DispatcherServiceClient
	token     string
	requestID string
	timeout   time.Duration
	out       *printer
}

// callContext carries the identity and request id metadata and the per-call deadline.
func (c *client) callContext(parent context.Context) (context.Context, context.CancelFunc) {
	md := metadata.Pairs(requestIDHeader, c.requestID)
	if c.token != "" {
		md.Set(identityHeader, c.token)
	}
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	return metadata.NewOutgoingContext(ctx, md), cancel
}

// eventStream is what RunTask and WatchTask streams have in common.
type eventStream interface {
	Recv() (*agentmeshv1.TaskEvent, error)
}

type runStream struct {
	agentmeshv1.DispatcherService_RunTaskClient
}

func (s runStream) Recv() (*agentmeshv1.TaskEvent, error) {
	reply, err := s.DispatcherService_RunTaskClient.Recv()
	return reply.GetEvent(), err
}

type watchStream struct {
	agentmeshv1.DispatcherService_WatchTaskClient
}

func (s watchStream) Recv() (*agentmeshv1.TaskEvent, error) {
	reply, err := s.DispatcherService_WatchTaskClient.Recv()
	return reply.GetEvent(), err
}

// progress is what the client has printed of one task.
type progress struct {
	last    int64
	status  agentmeshv1.TaskStatus
	printed int
}

func terminal(s agentmeshv1.TaskStatus) bool {
	switch s {
	case agentmeshv1.TaskStatus_TASK_STATUS_SUCCEEDED, agentmeshv1.TaskStatus_TASK_STATUS_FAILED,
		agentmeshv1.TaskStatus_TASK_STATUS_ABORTED, agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
		return true
	}
	return false
}

// resumable: the stream broke in a way after which the same watch may succeed.
func resumable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal:
		return true
	}
	return false
}

// consume prints a stream's events until it ends. dropAfter > 0 cancels the stream after that many
// events printed (a dropped connection; the task keeps running). Returns "ended", "dropped" or "broken".
func (c *client) consume(stream eventStream, cancel context.CancelFunc, name string, p *progress, dropAfter int) (string, error) {
	defer cancel()
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return "ended", nil
		}
		if err != nil {
			if resumable(err) {
				return "broken", nil
			}
			return "", err
		}
		if ev.GetKind() == agentmeshv1.TaskEventKind_TASK_EVENT_KIND_HEARTBEAT || ev.GetSequence() == 0 {
			continue
		}
		// A replay may overlap what was already printed; print each event once.
		if ev.GetSequence() <= p.last {
			continue
		}
		if ev.GetSequence() != p.last+1 {
			c.out.info(map[string]interface{}{"gap_after": p.last, "next": ev.GetSequence()},
				fmt.Sprintf("!! gap: expected sequence %d, got %d", p.last+1, ev.GetSequence()))
		}
		p.last, p.status = ev.GetSequence(), ev.GetStatus()
		p.printed++
		c.out.event(name, ev)
		if dropAfter > 0 && p.printed == dropAfter {
			return "dropped", nil
		}
	}
}

func (c *client) run(args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	agent := fs.String("agent", "", "the agent to run (required)")
	goal := fs.String("goal", "", "the task's goal (required)")
	taskID := fs.String("task-id", "", "a client-chosen task id (default: a random one)")
	dropAfter := fs.Int("disconnect-after", 0, "drop the stream after N events, then resume")
	if err := c.parse(fs, args); err != nil {
		return 0, err
	}
	if *agent == "" || *goal == "" {
		return 0, fmt.Errorf("%w: run needs -agent and -goal", errUsage)
	}
	// A client-chosen id makes StartTask idempotent: a RunTask that broke before its first event can
	// be run again without starting the task twice.
	if *taskID == "" {
		*taskID = "task-" + randomHex(16)
	}
	start := &agentmeshv1.StartTaskRequest{AgentId: *agent, Goal: *goal, TaskId: *taskID}
	c.out.info(map[string]interface{}{"task_id": *taskID, "request_id": c.requestID},
		fmt.Sprintf("task %s request_id %s", *taskID, c.requestID))

	p := &progress{}
	ctx, cancel := c.callContext(context.Background())
	stream, err := c.stub.RunTask(ctx, &agentmeshv1.RunTaskRequest{Start: start})
	if err != nil {
		cancel()
		return 0, err
	}
	why, err := c.consume(runStream{stream}, cancel, "run", p, *dropAfter)
	for resumes := 0; err == nil && !terminal(p.status); resumes++ {
		if why == "ended" && p.status == agentmeshv1.TaskStatus_TASK_STATUS_WAITING_APPROVAL {
			break
		}
		if resumes >= maxResumes {
			return 0, fmt.Errorf("task %s still %s after %d resumes", *taskID, statusName(p.status), maxResumes)
		}
		if why == "broken" {
			time.Sleep(time.Duration(200<<resumes) * time.Millisecond)
		}
		ctx, cancel = c.callContext(context.Background())
		if p.last == 0 {
			// Nothing seen yet: RunTask again (idempotent by task_id).
			c.out.resume(*taskID, p.last, why, "RunTask")
			stream, err = c.stub.RunTask(ctx, &agentmeshv1.RunTaskRequest{Start: start})
			if err == nil {
				why, err = c.consume(runStream{stream}, cancel, "run", p, 0)
			}
		} else {
			c.out.resume(*taskID, p.last, why, "WatchTask")
			var watch agentmeshv1.DispatcherService_WatchTaskClient
			watch, err = c.stub.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{TaskId: *taskID, AfterSequence: p.last})
			if err == nil {
				why, err = c.consume(watchStream{watch}, cancel, "watch", p, 0)
			}
		}
		if err != nil {
			cancel()
		}
	}
	if err != nil {
		return 0, err
	}
	return c.finish(*taskID)
}

func (c *client) watch(args []string) (int, error) {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	taskID := fs.String("task-id", "", "the task (required)")
	after := fs.Int64("after", 0, "replay events with a sequence greater than this")
	if err := c.parse(fs, args); err != nil {
		return 0, err
	}
	if *taskID == "" {
		return 0, fmt.Errorf("%w: watch needs -task-id", errUsage)
	}
	p := &progress{last: *after}
	ctx, cancel := c.callContext(context.Background())
	stream, err := c.stub.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{TaskId: *taskID, AfterSequence: *after})
	if err != nil {
		cancel()
		return 0, err
	}
	if _, err := c.consume(watchStream{stream}, cancel, "watch", p, 0); err != nil {
		return 0, err
	}
	return c.finish(*taskID)
}

// finish prints the task as GetTask reports it; exit 0 only when it SUCCEEDED.
func (c *client) finish(taskID string) (int, error) {
	ctx, cancel := c.callContext(context.Background())
	defer cancel()
	reply, err := c.stub.GetTask(ctx, &agentmeshv1.GetTaskRequest{TaskId: taskID})
	if err != nil {
		return 0, err
	}
	c.out.task(reply.GetTask())
	if reply.GetTask().GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		return 0, nil
	}
	return 1, nil
}

func (c *client) agents(args []string) (int, error) {
	if err := c.parse(flag.NewFlagSet("agents", flag.ContinueOnError), args); err != nil {
		return 0, err
	}
	ctx, cancel := c.callContext(context.Background())
	defer cancel()
	reply, err := c.stub.ListAgents(ctx, &agentmeshv1.ListAgentsRequest{})
	if err != nil {
		return 0, err
	}
	for _, a := range reply.GetAgents() {
		c.out.emit(map[string]interface{}{"type": "agent", "agent_id": a.GetAgentId(), "model": a.GetModel(), "tools": a.GetTools()},
			fmt.Sprintf("%s\t%s\t%s", a.GetAgentId(), a.GetModel(), a.GetDescription()))
	}
	return 0, nil
}

// parse adds the flags every command takes, then parses.
func (c *client) parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	c.out.json = *asJSON
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func statusName(s agentmeshv1.TaskStatus) string {
	return strings.TrimPrefix(s.String(), "TASK_STATUS_")
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	global := flag.NewFlagSet("agentmesh-go-client", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	target := global.String("target", envOr("AM_EXAMPLE_DISPATCHER", "127.0.0.1:50051"), "dispatcher host:port")
	timeout := global.Duration("timeout", 5*time.Minute, "deadline of each call")
	commands := map[string]func(*client, []string) (int, error){
		"run": (*client).run, "watch": (*client).watch, "agents": (*client).agents,
	}
	usage := "usage: agentmesh-go-client [-target HOST:PORT] [-timeout D] run|watch|agents [options]"
	if err := global.Parse(argv); err != nil || global.NArg() == 0 || commands[global.Arg(0)] == nil {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	conn, err := grpc.Dial(*target, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentmesh-go-client: %v\n", err)
		return 1
	}
	defer conn.Close()
	c := &client{
		stub:      agentmeshv1.NewDispatcherServiceClient(conn),
		token:     os.Getenv("AM_EXAMPLE_TOKEN"),
		requestID: randomHex(16),
		timeout:   *timeout,
		out:       &printer{w: os.Stdout},
	}
	code, err := commands[global.Arg(0)](c, global.Args()[1:])
	switch {
	case err == nil:
		return code
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, ok := status.FromError(err); ok {
		// A failed call: its typed error (class, ErrorDetail, google.rpc details), not a stack trace.
		c.out.typedError(err)
		return 3
	}
	fmt.Fprintf(os.Stderr, "agentmesh-go-client: %v\n", err)
	return 1
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
