#!/usr/bin/env node
// A batch runtime in plain Node.js (20 or newer: the built-in `fetch`, no
// packages), written from the served OpenAPI document alone — the protocol of
// docs/runtime-guide.md §2, "A whole run in K + 3 requests":
//
//   launch (POST launches) → a step created STARTED → one chunk commit per chunk,
//   the last one finishing the step → the execution's transition, with its
//   exit code.
//
// It reads `<url>/api/v1/schema/`, takes the base from its `servers` entry and
// each request's method and path from the operation's `operationId`, so it
// follows the API wherever a site mounts it. Its job: the items 0..items-1 in
// chunks, each item written to --out as one JSON line. The checkpoint is the
// next item's offset; a restart (the next launch after a FAILED attempt) takes
// over the failed step's checkpoint and counts and resumes there, so no chunk
// is written twice.
//
//   node examples/node/runtime.mjs --url http://127.0.0.1:8000 --token KEY \
//        --items 10 --chunk 3 --out items.jsonl [--fail-after 2]
//
// --fail-after N makes the reader fail when asked for chunk N + 1 of this run:
// the runtime then ends its step and its execution FAILED (a failure id and the
// error's detail: type, message, stack) and exits 1; run it again without the
// option to restart.
// The token (--token or OXIDE_BATCH_TOKEN) is a batch-runtime user's.
//
// Exit status, as the Python examples': 0 COMPLETED, 1 FAILED, 2 STOPPED,
// 3 fenced (a recovery took the execution away), 4 refused (the instance is
// running or completed), 5 any other refusal or error.
//
// Left out, for brevity: retries (a 503 carries Retry-After), the settling of
// an answer that never came (docs/runtime-guide.md, "unknown commit"), and a
// heartbeat between chunks that take longer than the lease (each chunk commit
// carrying the owner token is activity).

import { randomBytes, randomInt } from "node:crypto";
import { appendFileSync } from "node:fs";
import { hostname } from "node:os";
import { parseArgs } from "node:util";

const CHECKPOINT_SCHEMA = "example.offset";
const EXIT = { COMPLETED: 0, FAILED: 1, STOPPED: 2, FENCED: 3, REFUSED: 4, ERROR: 5 };

class Problem extends Error {
  constructor(status, body) {
    super(`${status} ${body.code ?? ""}: ${body.detail ?? JSON.stringify(body)}`);
    this.status = status;
    this.code = body.code;
    this.body = body;
  }
}

class Fenced extends Error {}
class StopRequested extends Error {}

// The API as its OpenAPI document describes it: operations by operationId.
class Api {
  static async open(siteUrl, token) {
    const schemaUrl = new URL("api/v1/schema/", siteUrl.endsWith("/") ? siteUrl : `${siteUrl}/`);
    const response = await fetch(schemaUrl, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`GET ${schemaUrl}: ${response.status}`);
    const document = await response.json();
    const operations = {};
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        operations[operation.operationId] = { method: method.toUpperCase(), path };
      }
    }
    // OpenAPI: an operation's URL is the server's URL followed by its path.
    return new Api(document.servers[0].url.replace(/\/$/, ""), token, operations);
  }

  constructor(server, token, operations) {
    this.server = server;
    this.token = token;
    this.operations = operations;
  }

  async call(operationId, ids, body) {
    const operation = this.operations[operationId];
    if (!operation) throw new Error(`the document has no operation ${operationId}`);
    const path = operation.path.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(ids[name]));
    const response = await fetch(this.server + path, {
      method: operation.method,
      headers: {
        Authorization: `Token ${this.token}`,
        "Content-Type": "application/json",
        Accept: "application/json",
      },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Problem(response.status, answer);
    return answer;
  }
}

// The job's reader: the items from `offset`, `size` at a time; it fails when
// asked for chunk `failAfter + 1` of this run (the simulated fault).
function* chunks(total, size, offset, failAfter) {
  let served = 0;
  for (let start = offset; start < total; start += size) {
    if (failAfter !== undefined && served === failAfter) {
      throw new Error(`the reader failed before chunk ${served + 1} (--fail-after)`);
    }
    served += 1;
    const items = [];
    for (let item = start; item < Math.min(start + size, total); item += 1) items.push(item);
    yield items;
  }
}

// A write's answer carries the execution's control state: the chunk boundary's observation.
function observe(answer) {
  const control = answer.control;
  if (control.fenced || !control.owner_matches) throw new Fenced("a recovery fenced this worker");
  if (control.stop_requested) throw new StopRequested("an operator asked for a stop");
}

// Who runs it (shown in the console's case file, `batch_show` and the API's
// `worker`): this machine's host name, this process, its client.
const worker = {
  host: hostname().slice(0, 255),
  pid: process.pid,
  name: null,
  client: `node-example ${process.versions.node}`,
};

async function run(api, options) {
  const ownerToken = randomBytes(16).toString("hex");
  const launched = await api.call("launch", {}, {
    job_name: options.job,
    identifying_parameters: { run: options.run },
    owner_token: ownerToken,
    worker,
  });
  let execution = launched.execution;
  console.log(`execution ${execution.id}, attempt ${execution.attempt}: STARTED`);

  let step = await api.call("create_step", { execution_id: execution.id }, {
    step_name: "load",
    status: "STARTED",
    owner_token: ownerToken,
    worker,
  });
  let offset = step.checkpoint?.payload?.offset ?? 0;
  console.log(`step ${step.id}: from item ${offset}`);

  const total = Number(options.items);
  const size = Number(options.chunk);
  const failAfter = options["fail-after"] === undefined ? undefined : Number(options["fail-after"]);
  try {
    for (const items of chunks(total, size, offset, failAfter)) {
      for (const item of items) {
        appendFileSync(options.out, `${JSON.stringify({ item, attempt: execution.attempt })}\n`);
      }
      offset = items[items.length - 1] + 1;
      const last = offset >= total;
      step = await api.call("commit_chunk", { step_id: step.id }, {
        expected_version: step.version,
        // `committed` is left out: a chunk commit is one commit (its default, 1).
        counts: { read: items.length, processed: items.length, written: items.length },
        checkpoint: { schema: CHECKPOINT_SCHEMA, schema_version: 1, payload: { offset } },
        owner_token: ownerToken,
        ...(last ? { finish: "COMPLETED", exit_code: "LOADED" } : {}),
      });
      observe(step);
    }
    if (step.status !== "COMPLETED") {
      // Nothing left to read (a restart after the last chunk): end the step by itself.
      step = await api.call("transition_step", { step_id: step.id }, {
        expected_version: step.version,
        status: "COMPLETED",
        exit_code: "LOADED",
        owner_token: ownerToken,
      });
    }
    execution = await api.call("transition_execution", { execution_id: execution.id }, {
      expected_version: execution.version,
      status: "COMPLETED",
      exit_code: "COMPLETED",
      owner_token: ownerToken,
    });
    console.log(`execution ${execution.id}: COMPLETED after item ${offset}`);
    return EXIT.COMPLETED;
  } catch (error) {
    if (error instanceof Fenced) {
      console.error(error.message);
      return EXIT.FENCED;
    }
    const stopped = error instanceof StopRequested;
    const status = stopped ? "STOPPED" : "FAILED";
    // The failure id goes to this log and to the server; the detail (the error's
    // type, message and stack) goes with it: the server scrubs secrets out of it
    // and keeps what its OXIDE_BATCH_FAILURE_DETAIL allows (and cuts what is
    // too long: 200 bytes, 2 KiB, 16 KiB).
    const failure = {
      category: "USER_COMPONENT",
      failure_id: randomInt(1, 2 ** 47),
      detail: { type: error.name, message: error.message, traceback: error.stack ?? null },
    };
    console.error(`${status}: ${error.message} (failure ${failure.failure_id})`);
    await api.call("transition_step", { step_id: step.id }, {
      expected_version: step.version,
      status,
      owner_token: ownerToken,
      ...(stopped ? {} : { failure }),
    });
    await api.call("transition_execution", { execution_id: execution.id }, {
      expected_version: execution.version,
      status,
      owner_token: ownerToken,
      ...(stopped ? {} : { failure }),
    });
    return stopped ? EXIT.STOPPED : EXIT.FAILED;
  }
}

async function main() {
  const { values: options } = parseArgs({
    options: {
      url: { type: "string", default: process.env.OXIDE_BATCH_URL ?? "http://127.0.0.1:8000" },
      token: { type: "string", default: process.env.OXIDE_BATCH_TOKEN },
      job: { type: "string", default: "node_import" },
      run: { type: "string", default: "2026-07-29" },
      items: { type: "string", default: "10" },
      chunk: { type: "string", default: "3" },
      out: { type: "string", default: "items.jsonl" },
      "fail-after": { type: "string" },
    },
  });
  if (!options.token) {
    console.error("a runtime token is needed: --token KEY or OXIDE_BATCH_TOKEN");
    return EXIT.ERROR;
  }
  const api = await Api.open(options.url, options.token);
  try {
    return await run(api, options);
  } catch (error) {
    if (error instanceof Problem && ["execution_already_active", "completed_instance"].includes(error.code)) {
      console.error(`refused: ${error.message}`);
      return EXIT.REFUSED;
    }
    console.error(error instanceof Problem ? `refused: ${error.message}` : error);
    return EXIT.ERROR;
  }
}

process.exitCode = await main();
