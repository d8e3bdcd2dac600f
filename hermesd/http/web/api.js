// Calls to the daemon's HTTP door with the login cookie; POSTs carry the CSRF value.

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function csrf() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("hermesd_csrf="));
  return found ? found.slice("hermesd_csrf=".length) : "";
}

async function request(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") {
    init.headers["X-CSRF-Token"] = csrf();
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body || {});
  }
  const answer = await fetch(path, init);
  if (answer.status === 401) {
    location.assign("/"); // the login form
    throw new ApiError(401, "not logged in", "invalid_token");
  }
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const err = data.error || {};
    throw new ApiError(answer.status, err.message || answer.statusText, err.code);
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);
export const rpc = (method, params) => post(`/v1/rpc/${method}`, params || {});

export async function logout() {
  await fetch("/logout", { method: "POST", headers: { "X-CSRF-Token": csrf() } });
  location.assign("/");
}
