// Output: one line per fact, human-readable or (--json) one JSON object per line, and the typed error
// of a failed call (docs/errors.md).
//
// agentmesh sends a fault of the RPC itself as a gRPC status whose details (the
// grpc-status-details-bin trailer) hold our own agentmesh.v1.ErrorDetail (code, error_class,
// violations, retryable, retry_after, fallback_tool, missing_permission, metadata) beside the standard
// google.rpc.ErrorInfo / RetryInfo / BadRequest, which say the same for clients without our types.
// Connect-ES decodes the trailer; findDetails(ErrorDetailSchema) picks ours out. A status without
// details comes from gRPC itself (or a proxy), not from agentmesh.

import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorClass, ErrorCode, type ErrorDetail, ErrorDetailSchema } from "../../../gen/ts/agentmesh/v1/common_pb.js";
import { type Task, type TaskEvent, TaskEventKind, TaskStatus } from "../../../gen/ts/agentmesh/v1/dispatcher_pb.js";

// What a client should do with an error of each class (docs/errors.md has the per-code detail).
const CLASS_ADVICE: Record<string, string> = {
  CONTRACT: "the call was malformed for its tool or schema: fix it with the violations, then call again",
  ENGINEERING:
    "a fault outside the request's shape: retry only if retryable (after RetryInfo), else fix the cause or take the fallback",
  FATAL: "stop: continuing is unsafe or unpaid; a human decides what happens next",
};

// The canonical gRPC status names, as every language prints them (Connect's Code says NotFound, Canceled).
const GRPC_STATUS_NAMES = [
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
];

export const statusName = (s: TaskStatus): string => TaskStatus[s] ?? String(s);
const kindName = (k: TaskEventKind): string => TaskEventKind[k] ?? String(k);
const codeName = (c: ErrorCode): string => ErrorCode[c] ?? String(c);
const className = (c: ErrorClass): string => ErrorClass[c] ?? String(c);
// The message in its canonical JSON form (proto field names), as the Go client prints it too.
const detailJson = (d: ErrorDetail): JsonValue => toJson(ErrorDetailSchema, d, { useProtoFieldName: true });

type Record_ = { [key: string]: unknown };

export class Printer {
  constructor(readonly json: boolean) {}

  emit(record: Record_, text: string): void {
    process.stdout.write((this.json ? JSON.stringify(record) : text) + "\n");
  }

  info(fields: Record_, text: string): void {
    this.emit({ type: "info", ...fields }, text);
  }

  event(stream: string, ev: TaskEvent): void {
    const record: Record_ = {
      type: "event",
      stream,
      task_id: ev.taskId,
      sequence: Number(ev.sequence), // sequences stay far below 2^53
      kind: kindName(ev.kind),
      status: statusName(ev.status),
      step: ev.step,
      message: ev.message,
    };
    let text = `#${ev.sequence} ${kindName(ev.kind)} [${statusName(ev.status)}] step ${ev.step}: ${ev.message}`;
    if (ev.error && ev.error.code !== ErrorCode.UNSPECIFIED) {
      record.error = detailJson(ev.error);
      text += ` (${codeName(ev.error.code)}, ${className(ev.error.errorClass)})`;
    }
    if (ev.pendingApproval?.approvalId) {
      record.approval_id = ev.pendingApproval.approvalId;
      text += `\n    waits for approval ${ev.pendingApproval.approvalId}`;
    }
    this.emit(record, text);
  }

  resume(taskId: string, after: bigint, reason: string, method: string): void {
    const how = method === "WatchTask" ? `WatchTask(after_sequence=${after})` : `${method} (same task_id)`;
    this.emit(
      { type: "resume", task_id: taskId, after_sequence: Number(after), reason, method },
      `-- stream ${reason}; resuming with ${how}`,
    );
  }

  task(task: Task): void {
    const record: Record_ = {
      type: "task",
      task_id: task.taskId,
      agent_id: task.agentId,
      status: statusName(task.status),
      step: task.step,
      last_sequence: Number(task.lastSequence),
      answer: task.answer,
      request_id: task.requestId,
    };
    let text = `task ${task.taskId} ${statusName(task.status)} after ${task.step} steps, last sequence ${task.lastSequence}`;
    if (task.answer) text += `\nanswer: ${task.answer}`;
    if (task.error && task.error.code !== ErrorCode.UNSPECIFIED) {
      record.error = detailJson(task.error);
      text += `\nerror: ${codeName(task.error.code)} (${className(task.error.errorClass)}): ${task.error.message}`;
    }
    this.emit(record, text);
  }

  // A failed call: the gRPC status, our ErrorDetail, and the names of the other details it carried.
  typedError(err: ConnectError): void {
    const detail = err.findDetails(ErrorDetailSchema)[0];
    const grpcStatus = GRPC_STATUS_NAMES[err.code] ?? `CODE_${err.code}`;
    const record: Record_ = {
      type: "error",
      grpc_status: grpcStatus,
      grpc_code: err.code,
      message: err.rawMessage,
      code: detail ? codeName(detail.code) : null,
      error_class: detail ? className(detail.errorClass) : null,
      retryable: detail ? detail.retryable : null,
      detail: detail ? detailJson(detail) : undefined,
      detail_types: err.details.map((d) => ("desc" in d ? d.desc.typeName : d.type)),
    };
    const lines = [
      `error ${record.code ?? grpcStatus} class=${record.error_class ?? "UNKNOWN"} grpc=${grpcStatus}(${err.code})`,
      `  message: ${err.rawMessage}`,
    ];
    if (detail) {
      lines.push(
        `  agentmesh.v1.ErrorDetail: code=ERROR_CODE_${codeName(detail.code)} error_class=ERROR_CLASS_${className(detail.errorClass)} retryable=${detail.retryable}`,
      );
      for (const v of detail.violations) {
        let line = `    violation ${v.path}: ${v.rule}`;
        if (v.expected) line += ` expects ${v.expected}`;
        if (v.actual) line += `, got ${v.actual}`;
        if (v.hint) line += ` (${v.hint})`;
        lines.push(line);
      }
      if (detail.missingPermission) lines.push(`    missing_permission: ${detail.missingPermission}`);
      if (detail.fallbackTool) lines.push(`    fallback_tool: ${detail.fallbackTool}`);
      if (detail.retryAfter) {
        const seconds = Number(detail.retryAfter.seconds) + detail.retryAfter.nanos / 1e9;
        lines.push(`    retry_after: ${seconds}s`);
      }
      for (const key of Object.keys(detail.metadata).sort()) lines.push(`    metadata ${key}: ${detail.metadata[key]}`);
      lines.push(`  also: ${(record.detail_types as string[]).filter((t) => t !== ErrorDetailSchema.typeName).join(", ")}`);
    } else {
      lines.push(
        err.code === Code.Unknown && !err.isWireError
          ? `  not a gRPC status: ${String(err.cause ?? err.message)}`
          : "  no agentmesh details: the status came from gRPC itself or a proxy",
      );
    }
    const advice = CLASS_ADVICE[String(record.error_class)];
    if (advice) lines.push(`  what to do: ${advice}`);
    this.emit(record, lines.join("\n"));
  }
}
