// Who the console calls as. The token lives in memory and in this tab's sessionStorage (so a reload keeps
// the session and closing the tab ends it); never in a URL, a cookie or localStorage. It is sent only as
// `authorization: Bearer` on Connect POSTs, so another site cannot make the browser act with it (no CSRF).
// Two ways in: a pasted token (`agentmesh token --role operator`, for dev), or, where the dispatcher's
// config names an OIDC issuer, the authorization code flow with PKCE (a public client: no secret).

import type { OidcConfig } from "./config";

const TOKEN_KEY = "agentmesh.console.token";
const PENDING_KEY = "agentmesh.console.oidc";

let token = "";

/** What the token says about its holder: read for display only (the services verify it). */
export interface Claims {
  subject: string;
  roles: string[];
  expires?: Date;
}

function base64UrlDecode(text: string): string {
  const padded = text.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(text.length / 4) * 4, "=");
  const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

function base64UrlEncode(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The claims of an agentmesh token (payload.signature) or a JWT (header.payload.signature), unverified. */
export function claims(value: string): Claims | null {
  const parts = value.split(".");
  const payload = parts.length === 3 ? parts[1] : parts.length === 2 ? parts[0] : undefined;
  if (payload === undefined) return null;
  try {
    const data = JSON.parse(base64UrlDecode(payload)) as Record<string, unknown>;
    const roles = Array.isArray(data.roles) ? data.roles.map(String) : [];
    const exp = typeof data.exp === "number" ? new Date(data.exp * 1000) : undefined;
    return { subject: String(data.sub ?? ""), roles, expires: exp };
  } catch {
    return null;
  }
}

export function currentToken(): string {
  return token;
}

export function setToken(value: string): void {
  token = value.trim();
  try {
    sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // Storage refused (a private mode): the token stays in memory for this page only.
  }
}

export function restoreToken(): void {
  try {
    token = sessionStorage.getItem(TOKEN_KEY) ?? "";
  } catch {
    token = "";
  }
  const seen = claims(token);
  if (seen?.expires !== undefined && seen.expires.getTime() < Date.now()) forget();
}

export function forget(): void {
  token = "";
  try {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(PENDING_KEY);
  } catch {
    // nothing stored
  }
}

function redirectUri(): string {
  return `${location.origin}${location.pathname}`;
}

function random(bytes: number): string {
  return base64UrlEncode(crypto.getRandomValues(new Uint8Array(bytes)));
}

/** Starts the OIDC login: to the IdP's authorization endpoint with a PKCE challenge (S256). */
export async function beginOidcLogin(oidc: OidcConfig): Promise<void> {
  const verifier = random(32);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  const pending = { verifier, state: random(16), nonce: random(16), route: location.hash || "#/tasks" };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const url = new URL(oidc.authorization_endpoint);
  const params: Record<string, string> = {
    response_type: "code",
    client_id: oidc.client_id,
    redirect_uri: redirectUri(),
    scope: oidc.scopes.join(" "),
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: base64UrlEncode(new Uint8Array(digest)),
    code_challenge_method: "S256",
  };
  if (oidc.audience) params.audience = oidc.audience;
  for (const [key, value] of Object.entries(params)) url.searchParams.set(key, value);
  location.assign(url.href);
}

/** Finishes an OIDC login when the IdP sent the browser back here (`?code=&state=` or `?error=`): the
 * code is exchanged for tokens at the token endpoint with the PKCE verifier, and the query is removed
 * from the address bar. Returns the route to show, or throws with the IdP's or the check's reason. */
export async function completeOidcLogin(oidc: OidcConfig | null): Promise<string | null> {
  const query = new URLSearchParams(location.search);
  if (!query.has("code") && !query.has("error")) return null;
  history.replaceState(null, "", redirectUri() + location.hash);
  const stored = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY);
  if (query.has("error")) {
    throw new Error(`the identity provider refused the login: ${query.get("error")} ${query.get("error_description") ?? ""}`);
  }
  if (oidc === null) throw new Error("an OIDC answer arrived but no OIDC login is configured");
  const pending = stored ? (JSON.parse(stored) as { verifier: string; state: string; nonce: string; route: string }) : null;
  if (pending === null || pending.state !== query.get("state")) {
    throw new Error("the login answer does not match a login started in this tab (state): start again");
  }
  const body = new URLSearchParams({
    grant_type: "authorization_code",
    code: query.get("code") ?? "",
    redirect_uri: redirectUri(),
    client_id: oidc.client_id,
    code_verifier: pending.verifier,
  });
  const response = await fetch(oidc.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
    body,
    credentials: "omit",
    referrerPolicy: "no-referrer",
  });
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (!response.ok) {
    throw new Error(`the token endpoint refused the code (HTTP ${response.status}): ${String(answer.error ?? "")}`);
  }
  const idToken = typeof answer.id_token === "string" ? answer.id_token : "";
  if (idToken) {
    const idClaims = JSON.parse(base64UrlDecode(idToken.split(".")[1] ?? "")) as Record<string, unknown>;
    if (idClaims.nonce !== pending.nonce) throw new Error("the ID token's nonce is not this login's: start again");
  }
  const chosen = answer[oidc.token];
  if (typeof chosen !== "string" || chosen === "") {
    throw new Error(`the token endpoint's answer has no ${oidc.token}`);
  }
  setToken(chosen);
  return pending.route;
}
