// Output: one line per fact, human-readable or (--json) one JSON object per line, and the typed error of a
// failed call (docs/errors.md).
//
// agentmesh sends a fault of the RPC itself as a gRPC status whose details (the grpc-status-details-bin
// trailer, a google.rpc.Status) hold our own agentmesh.v1.ErrorDetail (code, error_class, violations,
// retryable, retry_after, fallback_tool, missing_permission, metadata, request_id) beside the standard
// google.rpc.ErrorInfo (reason = our ErrorCode's name, metadata error_class, ...), RetryInfo and BadRequest,
// which say the same for clients without our types. io.grpc.protobuf.StatusProto reads the trailer; each
// detail is a google.protobuf.Any unpacked by its type. A status without details comes from gRPC itself
// (or a proxy), not from agentmesh.
package com.agentmesh.examples;

import com.agentmesh.v1.Agent;
import com.agentmesh.v1.ErrorDetail;
import com.agentmesh.v1.FieldViolation;
import com.agentmesh.v1.Task;
import com.agentmesh.v1.TaskEvent;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.ProtocolMessageEnum;
import com.google.protobuf.util.JsonFormat;
import com.google.rpc.ErrorInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

final class Output {
  private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();
  // The message in its canonical JSON form (proto field names), as the Go and TypeScript clients print it.
  private static final JsonFormat.Printer PROTO_JSON =
      JsonFormat.printer().preservingProtoFieldNames().omittingInsignificantWhitespace();
  private static final Metadata.Key<String> REQUEST_ID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);
  // What a client should do with an error of each class (docs/errors.md has the per-code detail).
  private static final Map<String, String> CLASS_ADVICE = Map.of(
      "CONTRACT", "the call was malformed for its tool or schema: fix it with the violations, then call again",
      "ENGINEERING", "a fault outside the request's shape: retry only if retryable (after RetryInfo), else fix "
          + "the cause or take the fallback",
      "FATAL", "stop: continuing is unsafe or unpaid; a human decides what happens next");

  private final boolean json;

  Output(boolean json) {
    this.json = json;
  }

  /** An enum's name without its type's prefix: TASK_STATUS_SUCCEEDED -> SUCCEEDED, as Go and TS print it. */
  static String name(ProtocolMessageEnum value) {
    String full = ((Enum<?>) value).name();
    String type = value.getDescriptorForType().getName(); // TaskStatus
    String prefix = type.replaceAll("([a-z0-9])([A-Z])", "$1_$2").toUpperCase() + "_";
    return full.startsWith(prefix) ? full.substring(prefix.length()) : full;
  }

  static JsonElement protoJson(com.google.protobuf.MessageOrBuilder message) {
    try {
      return JsonParser.parseString(PROTO_JSON.print(message));
    } catch (InvalidProtocolBufferException err) {
      throw new IllegalStateException(err);
    }
  }

  void emit(JsonObject record, String text) {
    System.out.println(json ? GSON.toJson(record) : text);
    System.out.flush();
  }

  void info(Map<String, Object> fields, String text) {
    JsonObject record = new JsonObject();
    record.addProperty("type", "info");
    new TreeMap<>(fields).forEach((k, v) -> record.add(k, GSON.toJsonTree(v)));
    emit(record, text);
  }

  void event(String stream, TaskEvent ev) {
    JsonObject record = new JsonObject();
    record.addProperty("type", "event");
    record.addProperty("stream", stream);
    record.addProperty("task_id", ev.getTaskId());
    record.addProperty("sequence", ev.getSequence());
    record.addProperty("kind", name(ev.getKind()));
    record.addProperty("status", name(ev.getStatus()));
    record.addProperty("step", ev.getStep());
    record.addProperty("message", ev.getMessage());
    StringBuilder text = new StringBuilder(String.format("#%d %s [%s] step %d: %s",
        ev.getSequence(), name(ev.getKind()), name(ev.getStatus()), ev.getStep(), ev.getMessage()));
    if (ev.hasError() && ev.getError().getCodeValue() != 0) {
      record.add("error", protoJson(ev.getError()));
      text.append(String.format(" (%s, %s)", name(ev.getError().getCode()), name(ev.getError().getErrorClass())));
    }
    if (ev.hasPendingApproval() && !ev.getPendingApproval().getApprovalId().isEmpty()) {
      record.addProperty("approval_id", ev.getPendingApproval().getApprovalId());
      text.append("\n    waits for approval ").append(ev.getPendingApproval().getApprovalId());
    }
    emit(record, text.toString());
  }

  void resume(String taskId, long after, Client.Why reason, String method) {
    JsonObject record = new JsonObject();
    record.addProperty("type", "resume");
    record.addProperty("task_id", taskId);
    record.addProperty("after_sequence", after);
    record.addProperty("reason", reason.name().toLowerCase());
    record.addProperty("method", method);
    String how = method.equals("WatchTask") ? "WatchTask(after_sequence=" + after + ")" : method + " (same task_id)";
    emit(record, "-- stream " + reason.name().toLowerCase() + "; resuming with " + how);
  }

  void task(Task task) {
    JsonObject record = new JsonObject();
    record.addProperty("type", "task");
    record.addProperty("task_id", task.getTaskId());
    record.addProperty("agent_id", task.getAgentId());
    record.addProperty("status", name(task.getStatus()));
    record.addProperty("step", task.getStep());
    record.addProperty("last_sequence", task.getLastSequence());
    record.addProperty("answer", task.getAnswer());
    record.addProperty("request_id", task.getRequestId());
    StringBuilder text = new StringBuilder(String.format("task %s %s after %d steps, last sequence %d",
        task.getTaskId(), name(task.getStatus()), task.getStep(), task.getLastSequence()));
    if (!task.getAnswer().isEmpty()) {
      text.append("\nanswer: ").append(task.getAnswer());
    }
    if (task.hasError() && task.getError().getCodeValue() != 0) {
      record.add("error", protoJson(task.getError()));
      text.append(String.format("\nerror: %s (%s): %s", name(task.getError().getCode()),
          name(task.getError().getErrorClass()), task.getError().getMessage()));
    }
    emit(record, text.toString());
  }

  void agent(Agent agent) {
    JsonObject record = new JsonObject();
    record.addProperty("type", "agent");
    record.addProperty("agent_id", agent.getAgentId());
    record.addProperty("model", agent.getModel());
    record.add("tools", GSON.toJsonTree(agent.getToolsList()));
    emit(record, agent.getAgentId() + "\t" + agent.getModel() + "\t" + agent.getDescription());
  }

  /** A failed call: the gRPC status, our ErrorDetail, google.rpc.ErrorInfo, and the other details' types. */
  void typedError(StatusRuntimeException err) {
    Status status = err.getStatus();
    String grpcStatus = status.getCode().name();
    ErrorDetail detail = null;
    ErrorInfo info = null;
    List<String> types = new ArrayList<>();
    com.google.rpc.Status rich = StatusProto.fromThrowable(err);
    if (rich != null) {
      for (Any any : rich.getDetailsList()) {
        types.add(any.getTypeUrl().substring(any.getTypeUrl().lastIndexOf('/') + 1));
        try {
          if (any.is(ErrorDetail.class)) {
            detail = any.unpack(ErrorDetail.class);
          } else if (any.is(ErrorInfo.class)) {
            info = any.unpack(ErrorInfo.class);
          }
        } catch (InvalidProtocolBufferException bad) {
          types.add("(undecodable " + any.getTypeUrl() + ")");
        }
      }
    }
    Metadata trailers = err.getTrailers();
    String requestId = trailers == null ? null : trailers.get(REQUEST_ID);
    JsonObject record = new JsonObject();
    record.addProperty("type", "error");
    record.addProperty("grpc_status", grpcStatus);
    record.addProperty("grpc_code", status.getCode().value());
    record.addProperty("message", status.getDescription() == null ? "" : status.getDescription());
    record.addProperty("code", detail == null ? null : name(detail.getCode()));
    record.addProperty("error_class", detail == null ? null : name(detail.getErrorClass()));
    record.addProperty("retryable", detail == null ? null : detail.getRetryable());
    if (detail != null) {
      record.add("detail", protoJson(detail));
    }
    if (info != null) {
      record.add("error_info", protoJson(info));
    }
    record.addProperty("request_id", requestId);
    record.add("detail_types", GSON.toJsonTree(types));

    List<String> lines = new ArrayList<>();
    String code = detail == null ? grpcStatus : name(detail.getCode());
    String errorClass = detail == null ? "UNKNOWN" : name(detail.getErrorClass());
    lines.add(String.format("error %s class=%s grpc=%s(%d)", code, errorClass, grpcStatus, status.getCode().value()));
    lines.add("  message: " + (status.getDescription() == null ? "" : status.getDescription()));
    if (detail != null) {
      lines.add(String.format("  agentmesh.v1.ErrorDetail: code=%s error_class=%s retryable=%s",
          detail.getCode().name(), detail.getErrorClass().name(), detail.getRetryable()));
      for (FieldViolation v : detail.getViolationsList()) {
        StringBuilder line = new StringBuilder("    violation " + v.getPath() + ": " + v.getRule());
        if (!v.getExpected().isEmpty()) {
          line.append(" expects ").append(v.getExpected());
        }
        if (!v.getActual().isEmpty()) {
          line.append(", got ").append(v.getActual());
        }
        if (!v.getHint().isEmpty()) {
          line.append(" (").append(v.getHint()).append(")");
        }
        lines.add(line.toString());
      }
      if (!detail.getMissingPermission().isEmpty()) {
        lines.add("    missing_permission: " + detail.getMissingPermission());
      }
      if (!detail.getFallbackTool().isEmpty()) {
        lines.add("    fallback_tool: " + detail.getFallbackTool());
      }
      new TreeMap<>(detail.getMetadataMap()).forEach((k, v) -> lines.add("    metadata " + k + ": " + v));
      if (!detail.getRequestId().isEmpty()) {
        lines.add("    request_id: " + detail.getRequestId());
      }
    }
    if (info != null) {
      lines.add(String.format("  google.rpc.ErrorInfo: reason=%s domain=%s metadata=%s",
          info.getReason(), info.getDomain(), new TreeMap<>(info.getMetadataMap())));
    }
    if (detail == null && info == null) {
      lines.add("  no agentmesh details: the status came from gRPC itself or a proxy");
    } else {
      lines.add("  also: " + String.join(", ", types.stream()
          .filter(t -> !t.equals("agentmesh.v1.ErrorDetail") && !t.equals("google.rpc.ErrorInfo"))
          .collect(Collectors.toList())));
    }
    String advice = detail == null ? null : CLASS_ADVICE.get(errorClass);
    if (advice != null) {
      lines.add("  what to do: " + advice);
    }
    emit(record, String.join("\n", lines));
  }
}
