// What the dispatcher tells the console at /console/config.json (agentmesh/rpc/console.py): where the
// other services' Connect edges are as this browser reaches them, the Jaeger UI, and the OIDC login.

export interface OidcConfig {
  issuer: string;
  client_id: string;
  authorization_endpoint: string;
  token_endpoint: string;
  scopes: string[];
  token: "access_token" | "id_token";
  audience: string;
}

export interface ConsoleConfig {
  environment: string;
  version: string;
  /** Base URL of tool_svc's Connect edge (ListTools). */
  tool_url: string;
  /** Base URL of provider_svc's Connect edge (GetSpendSummary, ListBudgets). */
  provider_url: string;
  /** The Jaeger UI, "" when none is configured. */
  jaeger_url: string;
  oidc: OidcConfig | null;
}

export async function loadConfig(): Promise<ConsoleConfig> {
  const response = await fetch("config.json", { cache: "no-store", credentials: "omit" });
  if (!response.ok) throw new Error(`config.json: HTTP ${response.status}`);
  return (await response.json()) as ConsoleConfig;
}
