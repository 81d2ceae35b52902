package main

// Output: one line per fact, human-readable or (-json) one JSON object per line, and the typed error
// of a failed call (docs/errors.md).
//
// agentmesh sends a fault of the RPC itself as a gRPC status whose details (the
// grpc-status-details-bin trailer) hold:
//
//	agentmesh.v1.ErrorDetail  our own type: code, error_class, violations, retryable, retry_after,
//	                          fallback_tool, missing_permission, metadata
//	google.rpc.ErrorInfo      reason = our ErrorCode name, domain = "agentmesh.v1",
//	                          metadata.error_class = CONTRACT | ENGINEERING | FATAL
//	google.rpc.RetryInfo      when the same call may succeed after retry_delay
//	google.rpc.BadRequest     the violated fields
//
// A status without details comes from gRPC itself (or a proxy), not from agentmesh.

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/gen/go/agentmesh/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

const errorDomain = "agentmesh.v1"

// What a client should do with an error of each class (docs/errors.md has the per-code detail).
var classAdvice = map[string]string{
	"CONTRACT":    "the call was malformed for its tool or schema: fix it with the violations, then call again",
	"ENGINEERING": "a fault outside the request's shape: retry only if retryable (after RetryInfo), else fix the cause or take the fallback",
	"FATAL":       "stop: continuing is unsafe or unpaid; a human decides what happens next",
}

type printer struct {
	w    io.Writer
	json bool
}

func (p *printer) emit(record map[string]interface{}, text string) {
	if p.json {
		line, err := json.Marshal(record)
		if err != nil {
			panic(err) // only maps, strings, numbers and protojson: cannot fail
		}
		fmt.Fprintln(p.w, string(line))
		return
	}
	fmt.Fprintln(p.w, text)
}

func (p *printer) info(fields map[string]interface{}, text string) {
	record := map[string]interface{}{"type": "info"}
	for k, v := range fields {
		record[k] = v
	}
	p.emit(record, text)
}

func (p *printer) event(stream string, ev *agentmeshv1.TaskEvent) {
	kind := strings.TrimPrefix(ev.GetKind().String(), "TASK_EVENT_KIND_")
	record := map[string]interface{}{
		"type": "event", "stream": stream, "task_id": ev.GetTaskId(), "sequence": ev.GetSequence(),
		"kind": kind, "status": statusName(ev.GetStatus()), "step": ev.GetStep(), "message": ev.GetMessage(),
	}
	text := fmt.Sprintf("#%d %s [%s] step %d: %s", ev.GetSequence(), kind, statusName(ev.GetStatus()), ev.GetStep(), ev.GetMessage())
	if e := ev.GetError(); e.GetCode() != agentmeshv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		record["error"] = protoJSON(e)
		text += fmt.Sprintf(" (%s, %s)", codeName(e.GetCode()), className(e.GetErrorClass()))
	}
	if id := ev.GetPendingApproval().GetApprovalId(); id != "" {
		record["approval_id"] = id
		text += "\n    waits for approval " + id
	}
	p.emit(record, text)
}

func (p *printer) resume(taskID string, after int64, reason, method string) {
	how := fmt.Sprintf("WatchTask(after_sequence=%d)", after)
	if method != "WatchTask" {
		how = method + " (same task_id)"
	}
	p.emit(map[string]interface{}{"type": "resume", "task_id": taskID, "after_sequence": after, "reason": reason, "method": method},
		fmt.Sprintf("-- stream %s; resuming with %s", reason, how))
}

func (p *printer) task(t *agentmeshv1.Task) {
	record := map[string]interface{}{
		"type": "task", "task_id": t.GetTaskId(), "agent_id": t.GetAgentId(), "status": statusName(t.GetStatus()),
		"step": t.GetStep(), "last_sequence": t.GetLastSequence(), "answer": t.GetAnswer(), "request_id": t.GetRequestId(),
	}
	text := fmt.Sprintf("task %s %s after %d steps, last sequence %d", t.GetTaskId(), statusName(t.GetStatus()), t.GetStep(), t.GetLastSequence())
	if t.GetAnswer() != "" {
		text += "\nanswer: " + t.GetAnswer()
	}
	if e := t.GetError(); e.GetCode() != agentmeshv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		record["error"] = protoJSON(e)
		text += fmt.Sprintf("\nerror: %s (%s): %s", codeName(e.GetCode()), className(e.GetErrorClass()), e.GetMessage())
	}
	p.emit(record, text)
}

// typedError prints a failed call: the gRPC status, our ErrorDetail and the google.rpc details.
func (p *printer) typedError(err error) {
	st, _ := status.FromError(err)
	record := map[string]interface{}{
		"type": "error", "grpc_status": codeString(st.Code()), "grpc_code": int(st.Code()), "message": st.Message(),
		"code": nil, "error_class": nil, "retryable": nil,
	}
	var detail *agentmeshv1.ErrorDetail
	var info *errdetails.ErrorInfo
	var badRequest *errdetails.BadRequest
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *agentmeshv1.ErrorDetail:
			detail = d
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.BadRequest:
			badRequest = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	// ErrorDetail is the complete source; ErrorInfo says the same in a type every gRPC language knows.
	if detail != nil {
		record["detail"] = protoJSON(detail)
		record["code"] = codeName(detail.GetCode())
		record["error_class"] = className(detail.GetErrorClass())
		record["retryable"] = detail.GetRetryable()
	} else if info.GetDomain() == errorDomain {
		record["code"] = info.GetReason()
		record["error_class"] = info.GetMetadata()["error_class"]
	}
	if info != nil {
		record["error_info"] = map[string]interface{}{"reason": info.GetReason(), "domain": info.GetDomain(), "metadata": info.GetMetadata()}
	}
	if badRequest != nil {
		violations := []map[string]string{}
		for _, v := range badRequest.GetFieldViolations() {
			violations = append(violations, map[string]string{"field": v.GetField(), "description": v.GetDescription()})
		}
		record["bad_request"] = map[string]interface{}{"field_violations": violations}
	}
	if retry.GetRetryDelay() != nil {
		delay := retry.GetRetryDelay()
		record["retry_after_s"] = float64(delay.GetSeconds()) + float64(delay.GetNanos())/1e9
	}
	p.emit(record, formatTypedError(record, detail))
}

func formatTypedError(record map[string]interface{}, detail *agentmeshv1.ErrorDetail) string {
	code, class := record["code"], record["error_class"]
	if code == nil {
		code = record["grpc_status"]
	}
	if class == nil {
		class = "UNKNOWN"
	}
	lines := []string{
		fmt.Sprintf("error %v class=%v grpc=%v(%v)", code, class, record["grpc_status"], record["grpc_code"]),
		fmt.Sprintf("  message: %v", record["message"]),
	}
	if detail != nil {
		lines = append(lines, fmt.Sprintf("  agentmesh.v1.ErrorDetail: code=%s error_class=%s retryable=%t",
			detail.GetCode(), detail.GetErrorClass(), detail.GetRetryable()))
		for _, v := range detail.GetViolations() {
			line := fmt.Sprintf("    violation %s: %s", v.GetPath(), v.GetRule())
			if v.GetExpected() != "" {
				line += " expects " + v.GetExpected()
			}
			if v.GetActual() != "" {
				line += ", got " + v.GetActual()
			}
			if v.GetHint() != "" {
				line += " (" + v.GetHint() + ")"
			}
			lines = append(lines, line)
		}
		if detail.GetMissingPermission() != "" {
			lines = append(lines, "    missing_permission: "+detail.GetMissingPermission())
		}
		if detail.GetFallbackTool() != "" {
			lines = append(lines, "    fallback_tool: "+detail.GetFallbackTool())
		}
		if d := detail.GetRetryAfter(); d != nil {
			lines = append(lines, "    retry_after: "+d.AsDuration().String())
		}
		keys := make([]string, 0, len(detail.GetMetadata()))
		for k := range detail.GetMetadata() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			lines = append(lines, fmt.Sprintf("    metadata %s: %s", k, detail.GetMetadata()[k]))
		}
	} else {
		lines = append(lines, "  no agentmesh details: the status came from gRPC itself or a proxy")
	}
	if info, ok := record["error_info"].(map[string]interface{}); ok {
		metadata, _ := json.Marshal(info["metadata"])
		lines = append(lines, fmt.Sprintf("  google.rpc.ErrorInfo: reason=%v domain=%v metadata=%s", info["reason"], info["domain"], metadata))
	}
	if advice, ok := classAdvice[fmt.Sprint(class)]; ok {
		lines = append(lines, "  what to do: "+advice)
	}
	return strings.Join(lines, "\n")
}

// protoJSON is a message in its canonical JSON form (proto field names), as a value json.Marshal embeds.
func protoJSON(m *agentmeshv1.ErrorDetail) json.RawMessage {
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		panic(err) // a message this process decoded always encodes
	}
	return json.RawMessage(data)
}

func codeName(c agentmeshv1.ErrorCode) string {
	return strings.TrimPrefix(c.String(), "ERROR_CODE_")
}

func className(c agentmeshv1.ErrorClass) string {
	return strings.TrimPrefix(c.String(), "ERROR_CLASS_")
}

// grpcStatusNames are the canonical gRPC status names, as every other language prints them (Go's
// codes.Code.String says NotFound, Canceled).
var grpcStatusNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

func codeString(c codes.Code) string {
	if int(c) < len(grpcStatusNames) {
		return grpcStatusNames[c]
	}
	return fmt.Sprintf("CODE_%d", c)
}
