// The console's only way to the services: their Connect edges, with the caller's token. The dispatcher
// is this page's own origin (every dispatcher RPC is served there); tool_svc's edge serves its read-only
// RPCs (ListTools) at `tool_url`, provider_svc's (GetSpendSummary, ListBudgets) at `provider_url`; each
// edge's server.cors_allowed_origins must list the console's origin.
// The edges authenticate and authorize every call exactly as they do gRPC calls.

import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ErrorClass, ErrorCode, ErrorDetailSchema } from "../gen/agentmesh/v1/common_pb";
import { DispatcherService } from "../gen/agentmesh/v1/dispatcher_pb";
import { ProviderService } from "../gen/agentmesh/v1/provider_pb";
import { ToolService } from "../gen/agentmesh/v1/tool_pb";
import { currentToken } from "./auth";
import type { ConsoleConfig } from "./config";

export interface Api {
  dispatcher: Client<typeof DispatcherService>;
  tools: Client<typeof ToolService>;
  toolUrl: string;
  provider: Client<typeof ProviderService>;
  providerUrl: string;
}

/** The clients, each call carrying `authorization: Bearer`; `onUnauthenticated` when a token is refused. */
export function makeApi(config: ConsoleConfig, onUnauthenticated: (reason: string) => void): Api {
  const bearer: Interceptor = (next) => async (request) => {
    const value = currentToken();
    if (value) request.header.set("authorization", `Bearer ${value}`);
    try {
      return await next(request);
    } catch (err) {
      const error = ConnectError.from(err);
      if (error.code === Code.Unauthenticated) onUnauthenticated(error.rawMessage);
      throw err;
    }
  };
  const transport = (baseUrl: string) =>
    createConnectTransport({ baseUrl, useBinaryFormat: true, interceptors: [bearer], fetch: (input, init) =>
      fetch(input, { ...init, credentials: "omit", referrerPolicy: "no-referrer" }) });
  const toolUrl = config.tool_url.replace(/\/+$/, "");
  const providerUrl = (config.provider_url ?? "").replace(/\/+$/, "");
  return {
    dispatcher: createClient(DispatcherService, transport(location.origin)),
    tools: createClient(ToolService, transport(toolUrl)),
    toolUrl,
    provider: createClient(ProviderService, transport(providerUrl)),
    providerUrl,
  };
}

/** An error as the console shows it: what failed, the service's own words, and the typed detail. */
export interface Problem {
  /** "PERMISSION_DENIED", "NOT_FOUND", "UNAVAILABLE", ... (the gRPC / Connect code). */
  code: string;
  /** The service's message. */
  message: string;
  /** agentmesh's ErrorCode name, e.g. "PERMISSION_DENIED" or "FAILED_PRECONDITION" ("" when none). */
  errorCode: string;
  errorClass: string;
  /** The permission the caller lacks, e.g. "approver:not-task-creator". */
  missingPermission: string;
  requestId: string;
}

export function isAbort(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Canceled || (err instanceof DOMException && err.name === "AbortError");
}

export function problem(err: unknown): Problem {
  const error = ConnectError.from(err);
  const detail = error.findDetails(ErrorDetailSchema)[0];
  return {
    code: Code[error.code] ?? String(error.code),
    message: error.rawMessage || String(err),
    errorCode: detail ? ErrorCode[detail.code] ?? "" : "",
    errorClass: detail ? ErrorClass[detail.errorClass] ?? "" : "",
    missingPermission: detail?.missingPermission ?? "",
    requestId: error.metadata.get("x-request-id") ?? "",
  };
}

/** The code names the console prints, e.g. ErrorCode.SCHEMA_INVALID -> "SCHEMA_INVALID". */
export function errorCodeName(code: ErrorCode): string {
  return ErrorCode[code] ?? String(code);
}

export function errorClassName(value: ErrorClass): string {
  return ErrorClass[value] ?? String(value);
}
