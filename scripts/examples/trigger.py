#!/usr/bin/env python3
"""Trigger a FlowForge run through the HTTP API, wait for it, print its result.

Python's standard library only. With `ffctl daemon api` (or `ffctl daemon all
--api-listen ADDR`) running and a token from `ffctl token create NAME --role
operator`:

    export FLOWFORGE_API_URL=http://127.0.0.1:8090
    export FLOWFORGE_API_TOKEN=ffk_...
    scripts/examples/trigger.py wordcount --param corpus=$PWD/demo/corpus

It prints one JSON object on standard output, {"run_id", "state", "results"}
with each task's result by task name, and exits 0 when the run SUCCEEDED,
1 when it ended otherwise or the API refused (its error on standard error),
2 for bad arguments. --idempotency-key makes a retry of the whole script
safe: the second trigger answers the first's run.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


class APIError(Exception):
    """An answer of the API other than 2xx: its status, code and message."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


def call(base, token, method, path, body=None, headers=None, timeout=90):
    """Send one request and return (status, decoded JSON); raise APIError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base.rstrip("/") + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        try:
            err = json.load(e)["error"]
        except (ValueError, KeyError, TypeError):
            err = {"code": "http_" + str(e.code), "message": e.reason}
        raise APIError(e.code, err["code"], err["message"]) from None


def trigger(base, token, workflow, params, key=None):
    """Start a run of workflow; return its id (an earlier run's for a key used before)."""
    headers = {"Idempotency-Key": key} if key else {}
    path = "/v1/workflows/" + urllib.parse.quote(workflow, safe="") + "/runs"
    _, body = call(base, token, "POST", path, {"params": params}, headers)
    return body["run_id"]


def wait(base, token, run_id, deadline):
    """Long-poll until the run has ended (200); 408 means ask again."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"run {run_id} has not ended in time")
        poll = max(1, min(30, int(left)))
        try:
            _, run = call(base, token, "GET", f"/v1/runs/{run_id}/wait?timeout={poll}s", timeout=poll + 30)
            return run
        except APIError as e:
            if e.status not in (408, 503):  # 408: not yet; 503: a server stopping
                raise


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workflow")
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="a string param (repeatable)")
    p.add_argument("--params-json", default="{}", help="the params as a JSON object (--param overrides)")
    p.add_argument("--idempotency-key")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the run (default 600)")
    p.add_argument("--url", default=os.environ.get("FLOWFORGE_API_URL", "http://127.0.0.1:8090"))
    args = p.parse_args(argv)
    args.token = os.environ.get("FLOWFORGE_API_TOKEN", "")
    if not args.token:
        p.error("set FLOWFORGE_API_TOKEN to a token from `ffctl token create`")
    try:
        args.params = json.loads(args.params_json)
    except ValueError as e:
        p.error(f"--params-json: {e}")
    for kv in args.param:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            p.error(f"--param {kv!r}: want key=value")
        args.params[k] = v
    return args


def main(argv):
    args = parse_args(argv)
    try:
        run_id = trigger(args.url, args.token, args.workflow, args.params, args.idempotency_key)
        print(f"run {run_id} triggered; waiting", file=sys.stderr)
        run = wait(args.url, args.token, run_id, time.monotonic() + args.timeout)
    except (APIError, TimeoutError, urllib.error.URLError) as e:
        print(f"trigger.py: {e}", file=sys.stderr)
        return 1
    results = {t["name"]: t.get("result") for t in run.get("tasks", [])}
    print(json.dumps({"run_id": run["id"], "state": run["state"], "results": results}, sort_keys=True))
    return 0 if run["state"] == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
