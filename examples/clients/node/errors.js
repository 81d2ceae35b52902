'use strict';
// Reads the typed error of a failed agentmesh call (see docs/errors.md).
//
// agentmesh sends a fault of the RPC itself as a gRPC status whose `grpc-status-details-bin`
// trailer holds a serialized google.rpc.Status. Its `details` are Any messages:
//   google.rpc.ErrorInfo    reason = our ErrorCode name (e.g. "PERMISSION_DENIED"),
//                           domain = "agentmesh.v1", metadata.error_class = CONTRACT | ENGINEERING | FATAL
//                           (+ fallback_tool, missing_permission when set)
//   google.rpc.RetryInfo    when the same call may succeed after retry_delay
//   google.rpc.BadRequest   the violated fields
//   agentmesh.v1.ErrorDetail the same facts in our own type
// A status without that trailer comes from gRPC itself (or a proxy), not from agentmesh.

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protobuf = require('protobufjs');

const DETAILS_TRAILER = 'grpc-status-details-bin';
const DOMAIN = 'agentmesh.v1';

// The google/rpc protos are vendored (from googleapis-common-protos); ours come from protos/.
function loadDetailTypes(protosRoot) {
  // third_party: google/api/field_behavior.proto, vendored beside our contracts.
  const dirs = [path.join(__dirname, 'protos'), protosRoot, path.join(protosRoot, 'third_party')];
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    for (const dir of dirs) {
      const candidate = path.join(dir, target);
      if (fs.existsSync(candidate)) return candidate;
    }
    // google/protobuf/*.proto are bundled with protobufjs and resolved by name.
    return target;
  };
  root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto', 'agentmesh/v1/common.proto']);
  root.resolveAll();
  return root;
}

const TO_OBJECT = { enums: String, longs: Number, defaults: false, arrays: true, objects: true };

function durationSeconds(duration) {
  if (!duration) return null;
  return Number(duration.seconds || 0) + Number(duration.nanos || 0) / 1e9;
}

// Decodes the rich status of a grpc-js error; returns null when there is none.
function decodeRichStatus(root, err) {
  const values = err && err.metadata ? err.metadata.get(DETAILS_TRAILER) : [];
  if (!values || values.length === 0) return null;
  const raw = Buffer.isBuffer(values[0]) ? values[0] : Buffer.from(String(values[0]), 'base64');
  const Status = root.lookupType('google.rpc.Status');
  const status = Status.decode(raw);
  const details = [];
  for (const any of status.details) {
    const typeName = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
    let type = null;
    try {
      type = root.lookupType(typeName);
    } catch (_) {
      // A detail type this client does not know: keep its name, skip its body.
    }
    details.push({ type: typeName, value: type ? type.toObject(type.decode(any.value), TO_OBJECT) : null });
  }
  return { code: status.code, message: status.message, details };
}

// The typed view of a failed call: gRPC status, our code and class, and every detail found.
function typedError(root, err) {
  const statusName = Object.keys(grpc.status).find((k) => grpc.status[k] === err.code) || String(err.code);
  const out = {
    grpc_status: statusName,
    grpc_code: err.code,
    message: err.details || '',
    code: null,
    error_class: null,
    retryable: null,
    retry_after_s: null,
    error_info: null,
    retry_info: null,
    bad_request: null,
    detail: null,
  };
  const rich = decodeRichStatus(root, err);
  if (rich === null) return out;
  for (const { type, value } of rich.details) {
    if (type === 'google.rpc.ErrorInfo') out.error_info = value;
    else if (type === 'google.rpc.RetryInfo') out.retry_info = value;
    else if (type === 'google.rpc.BadRequest') out.bad_request = value;
    else if (type === 'agentmesh.v1.ErrorDetail') out.detail = value;
  }
  // ErrorInfo is the portable source (every gRPC language reads it); ErrorDetail adds our fields.
  if (out.error_info && out.error_info.domain === DOMAIN) {
    out.code = out.error_info.reason;
    out.error_class = (out.error_info.metadata || {}).error_class || null;
  }
  if (out.retry_info) out.retry_after_s = durationSeconds(out.retry_info.retryDelay);
  if (out.detail) {
    out.retryable = Boolean(out.detail.retryable);
    out.code = out.code || String(out.detail.code).replace(/^ERROR_CODE_/, '');
    out.error_class = out.error_class || String(out.detail.errorClass).replace(/^ERROR_CLASS_/, '');
  }
  return out;
}

// What a client should do with an error of each class (docs/errors.md has the per-code detail).
const CLASS_ADVICE = {
  CONTRACT: 'the call was malformed for its tool or schema: fix it with the violations, then call again',
  ENGINEERING: 'a fault outside the request\'s shape: retry only if retryable (after RetryInfo), else fix the cause or take the fallback',
  FATAL: 'stop: continuing is unsafe or unpaid; a human decides what happens next',
};

function formatTypedError(t) {
  const lines = [`error ${t.code || t.grpc_status} class=${t.error_class || 'UNKNOWN'} grpc=${t.grpc_status}(${t.grpc_code})`];
  lines.push(`  message: ${t.message}`);
  if (t.error_info) {
    lines.push(
      `  google.rpc.ErrorInfo: reason=${t.error_info.reason} domain=${t.error_info.domain} ` +
        `metadata=${JSON.stringify(t.error_info.metadata || {})}`,
    );
  } else {
    lines.push('  no agentmesh details: the status came from gRPC itself or a proxy');
  }
  if (t.retry_info) lines.push(`  google.rpc.RetryInfo: retry after ${t.retry_after_s}s`);
  if (t.bad_request) {
    for (const v of t.bad_request.fieldViolations || []) {
      lines.push(`  google.rpc.BadRequest: ${v.field}: ${v.description}`);
    }
  }
  if (t.detail && t.detail.missingPermission) lines.push(`  missing_permission: ${t.detail.missingPermission}`);
  if (t.error_class && CLASS_ADVICE[t.error_class]) lines.push(`  what to do: ${CLASS_ADVICE[t.error_class]}`);
  return lines.join('\n');
}

module.exports = { DETAILS_TRAILER, DOMAIN, CLASS_ADVICE, loadDetailTypes, decodeRichStatus, typedError, formatTypedError };
