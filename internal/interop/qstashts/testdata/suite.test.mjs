// The official QStash TypeScript SDK (@upstash/qstash, pinned in
// package-lock.json), unchanged, against qstashdev. qstashts_test.go starts
// three qstashdev servers (main: real clock; sched: a fake clock this suite
// moves through CONTROL_URL; us: the US_EAST_1 region with keys of its
// own), then runs `node --test` on this file. Every delivery any of them
// makes reaches the destination server below, which verifies it with the
// SDK's Receiver; the last test fails if one did not verify.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Client, Receiver } from "@upstash/qstash";

const env = process.env;
const MAIN = env.QSTASH_URL;
const TOKEN = env.QSTASH_TOKEN;
const CONTROL = env.CONTROL_URL;

const client = new Client({ baseUrl: MAIN, token: TOKEN, retry: false });
const sched = new Client({ baseUrl: env.SCHED_URL, token: TOKEN, retry: false });
const us = new Client({ baseUrl: env.US_URL, token: env.US_TOKEN, retry: false });
const receiver = new Receiver({
  currentSigningKey: env.QSTASH_CURRENT_SIGNING_KEY,
  nextSigningKey: env.QSTASH_NEXT_SIGNING_KEY,
});

// --- the destination: records and verifies every delivery ---------------

const deliveries = []; // {path, method, headers, body, verified, error}
const failures = []; // deliveries that did not verify
const destination = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const url = `${BASE}${req.url}`;
    const d = { path: req.url, method: req.method, headers: req.headers, body, verified: false };
    try {
      // Multi-region deliveries (path /us/...) are verified by the
      // region-aware receiver in their own test; the rest with the
      // default keys.
      const r = req.url.startsWith("/us/") ? regionReceiver : receiver;
      await r.verify({ signature: req.headers["upstash-signature"], body, url, upstashRegion: req.headers["upstash-region"] });
      d.verified = true;
    } catch (err) {
      d.error = String(err);
      failures.push(d);
    }
    deliveries.push(d);
    if (req.url.startsWith("/fail")) {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end("failing on purpose");
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"ok":true}');
  });
});
await new Promise((resolve) => destination.listen(0, "127.0.0.1", resolve));
const BASE = `http://127.0.0.1:${destination.address().port}`;
after(() => destination.close());

let regionReceiver; // set in the multi-region test

async function control(path) {
  const res = await fetch(`${CONTROL}${path}`, { method: "POST" });
  const text = await res.text();
  assert.equal(res.status, 200, `control ${path}: ${text}`);
  return text;
}
const idle = (server = "main") => control(`/idle?server=${server}`);
const received = (prefix) => deliveries.filter((d) => d.path.startsWith(prefix));
const unique = () => `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;

// --- publish ---------------------------------------------------------------

test("publish with every option", async () => {
  const tag = unique();
  const res = await client.publish({
    url: `${BASE}/opts/${tag}?q=1`,
    body: "hello",
    headers: { "Content-Type": "text/plain", "X-Custom": "v", Authorization: "Bearer secret" },
    method: "PUT",
    delay: 1,
    retries: 2,
    retryDelay: "10 * retried",
    timeout: "5s",
    callback: `${BASE}/cb/${tag}`,
    failureCallback: `${BASE}/fcb/${tag}`,
    deduplicationId: `dedup-${tag}`,
    flowControl: { key: `fc-${tag}`, parallelism: 2, rate: 10, period: "1m" },
    label: ["opts", tag],
    redact: { body: true, header: ["Authorization"] },
  });
  assert.match(res.messageId, /^msg_/);

  // Pending for a second: the API shows it, redacted.
  const m = await client.messages.get(res.messageId);
  assert.equal(m.url, `${BASE}/opts/${tag}?q=1`);
  assert.equal(m.method, "PUT");
  assert.equal(m.maxRetries, 2);
  assert.equal(m.retryDelayExpression, "10 * retried");
  assert.equal(m.callback, `${BASE}/cb/${tag}`);
  assert.equal(m.failureCallback, `${BASE}/fcb/${tag}`);
  assert.equal(m.flowControlKey, `fc-${tag}`);
  assert.equal(m.parallelism, 2);
  assert.equal(m.rate, 10);
  assert.equal(m.period, 60);
  assert.deepEqual(m.labels, ["opts", tag]);
  assert.equal(m.label, "opts");
  assert.match(m.body, /^REDACTED:[0-9a-f]{64}$/);
  assert.match(m.header.Authorization[0], /^REDACTED:/);
  assert.deepEqual(m.header["X-Custom"], ["v"]);
  assert.ok(m.notBefore > m.createdAt, "Upstash-Delay sets notBefore");

  // The same deduplication id within the window: the earlier message.
  const dup = await client.publish({ url: `${BASE}/opts/${tag}?q=1`, body: "again", deduplicationId: `dedup-${tag}` });
  assert.equal(dup.messageId, res.messageId);
  assert.equal(dup.deduplicated, true);

  await idle();
  const [d] = received(`/opts/${tag}`);
  assert.ok(d, "delivered");
  assert.equal(d.method, "PUT");
  assert.equal(d.body, "hello");
  assert.equal(d.headers["x-custom"], "v");
  assert.equal(d.headers.authorization, "Bearer secret", "the destination gets the real values");
  assert.equal(d.headers["upstash-message-id"], res.messageId);
  assert.equal(d.headers["upstash-retried"], "0");
  assert.equal(d.headers["user-agent"], "Upstash-QStash");
  const [cb] = received(`/cb/${tag}`);
  assert.ok(cb, "callback sent");
  const payload = JSON.parse(cb.body);
  assert.equal(payload.sourceMessageId, res.messageId);
  assert.equal(payload.status, 200);
});

test("publishJSON, content-based deduplication and publish to a URL group", async () => {
  const tag = unique();
  const a = await client.publishJSON({ url: `${BASE}/json/${tag}`, body: { n: 1 }, contentBasedDeduplication: true });
  const b = await client.publishJSON({ url: `${BASE}/json/${tag}`, body: { n: 1 }, contentBasedDeduplication: true });
  assert.equal(b.messageId, a.messageId);
  assert.equal(b.deduplicated, true);
  const c = await client.publishJSON({ url: `${BASE}/json/${tag}`, body: { n: 2 }, contentBasedDeduplication: true, notBefore: Math.floor(Date.now() / 1000) });
  assert.notEqual(c.messageId, a.messageId);
  await idle();
  const got = received(`/json/${tag}`).map((d) => JSON.parse(d.body).n).sort();
  assert.deepEqual(got, [1, 2]);
  assert.equal(received(`/json/${tag}`)[0].headers["content-type"], "application/json");
});

// --- batch -----------------------------------------------------------------

test("batch and batchJSON", async () => {
  const tag = unique();
  const group = `g-${tag}`.replaceAll(/[^A-Za-z0-9._-]/g, "_");
  await client.urlGroups.addEndpoints({ name: group, endpoints: [{ url: `${BASE}/batchg/${tag}/1` }, { url: `${BASE}/batchg/${tag}/2` }] });
  const res = await client.batch([
    { url: `${BASE}/batch/${tag}/a`, body: "a", headers: { "X-N": "a" }, label: "batch" },
    { urlGroup: group, body: "g" },
    { url: `${BASE}/batch/${tag}/q`, body: "q", queueName: `bq-${tag}`.replaceAll(/[^A-Za-z0-9._-]/g, "_") },
  ]);
  assert.equal(res.length, 3);
  assert.match(res[0].messageId, /^msg_/);
  assert.equal(res[1].length, 2, "a URL group answers one result per endpoint");
  assert.match(res[2].messageId, /^msg_/);
  const json = await client.batchJSON([{ url: `${BASE}/batch/${tag}/j`, body: { j: true } }]);
  assert.equal(json.length, 1);
  await idle();
  assert.equal(received(`/batch/${tag}/a`)[0].headers["x-n"], "a");
  assert.equal(received(`/batchg/${tag}/`).length, 2);
  assert.equal(received(`/batch/${tag}/q`).length, 1);
  assert.deepEqual(JSON.parse(received(`/batch/${tag}/j`)[0].body), { j: true });
  await client.urlGroups.delete(group);
});

// --- queues ----------------------------------------------------------------

test("queues: upsert, get, list, enqueue, pause, resume, delete", async () => {
  const name = `q-${unique()}`.replaceAll(/[^A-Za-z0-9._-]/g, "_");
  const q = client.queue({ queueName: name });
  await q.upsert({ parallelism: 1 });
  let info = await q.get();
  assert.equal(info.name, name);
  assert.equal(info.parallelism, 1);
  assert.ok((await q.list()).some((x) => x.name === name));
  await q.pause();
  assert.equal((await q.get()).paused, true);
  const r1 = await q.enqueueJSON({ url: `${BASE}/queue/${name}/1`, body: { i: 1 } });
  const r2 = await q.enqueue({ url: `${BASE}/queue/${name}/2`, body: "2" });
  assert.match(r1.messageId, /^msg_/);
  assert.match(r2.messageId, /^msg_/);
  info = await q.get();
  assert.equal(info.lag, 2);
  assert.equal(received(`/queue/${name}/`).length, 0, "a paused queue delivers nothing");
  await q.resume();
  await idle();
  assert.deepEqual(received(`/queue/${name}/`).map((d) => d.path), [`/queue/${name}/1`, `/queue/${name}/2`], "FIFO");
  await q.delete();
  await assert.rejects(q.get(), /not found/);
});

// --- URL groups ------------------------------------------------------------

test("URL groups: add, get, list, publish, remove, delete", async () => {
  const name = `grp-${unique()}`.replaceAll(/[^A-Za-z0-9._-]/g, "_");
  await client.urlGroups.addEndpoints({ name, endpoints: [{ name: "one", url: `${BASE}/grp/${name}/1` }, { url: `${BASE}/grp/${name}/2` }] });
  const g = await client.urlGroups.get(name);
  assert.equal(g.name, name);
  assert.equal(g.endpoints.length, 2);
  assert.ok((await client.urlGroups.list()).some((x) => x.name === name));
  const res = await client.publishJSON({ urlGroup: name, body: { to: "all" } });
  assert.equal(res.length, 2);
  assert.deepEqual(res.map((r) => r.url).sort(), [`${BASE}/grp/${name}/1`, `${BASE}/grp/${name}/2`]);
  await idle();
  assert.equal(received(`/grp/${name}/`).length, 2);
  assert.equal(received(`/grp/${name}/1`)[0].headers["upstash-topic-name"], name);
  await client.urlGroups.removeEndpoints({ name, endpoints: [{ name: "one" }] });
  assert.equal((await client.urlGroups.get(name)).endpoints.length, 1);
  await client.urlGroups.delete(name);
  await assert.rejects(client.urlGroups.get(name), /not found/);
});

// --- messages --------------------------------------------------------------

async function delayed(n, extra = {}) {
  const ids = [];
  for (let i = 0; i < n; i++) {
    const r = await client.publish({ url: `${BASE}/never/${unique()}`, body: "x", delay: "1h", ...extra });
    ids.push(r.messageId);
  }
  return ids;
}

async function pending(ids) {
  const out = [];
  for (const id of ids) {
    try {
      await client.messages.get(id);
      out.push(id);
    } catch (err) {
      assert.match(String(err), /not found/);
    }
  }
  return out;
}

test("messages: get and cancel in every form", async () => {
  const [one] = await delayed(1);
  const m = await client.messages.get(one);
  assert.equal(m.messageId, one);
  assert.deepEqual(await client.messages.cancel(one), { cancelled: 1 });
  await assert.rejects(client.messages.get(one), /not found/);

  // An array cancels those and nothing else (qstashdev once cancelled
  // every pending message here).
  const ids = await delayed(3);
  assert.deepEqual(await client.messages.cancel([ids[0], ids[1]]), { cancelled: 2 });
  assert.deepEqual(await pending(ids), [ids[2]]);

  const tag = unique();
  const labelled = await delayed(2, { label: ["bulk", tag] });
  const other = await delayed(1, { label: "other" });
  assert.deepEqual(await client.messages.cancel({ filter: { label: tag } }), { cancelled: 2 });
  assert.deepEqual(await pending([...labelled, ...other]), other);

  const fc = await delayed(1, { flowControl: { key: `k-${tag}`, parallelism: 1 } });
  assert.deepEqual(await client.messages.cancel({ filter: { flowControlKey: `k-${tag}` } }), { cancelled: 1 });
  assert.deepEqual(await pending(fc), []);

  // Deprecated forms.
  const [d] = await delayed(1);
  await client.messages.delete(d);
  assert.deepEqual(await pending([d]), []);
  const many = await delayed(2);
  assert.equal(await client.messages.deleteMany(many), 2);

  // Everything.
  const rest = await delayed(2);
  const all = await client.messages.cancel({ all: true });
  assert.ok(all.cancelled >= 3, `cancel all: ${JSON.stringify(all)}`);
  assert.deepEqual(await pending([...rest, ids[2], ...other]), []);
  await delayed(1);
  assert.ok((await client.messages.deleteAll()) >= 1);
  assert.deepEqual(await client.messages.cancel([]), { cancelled: 0 });
});

// --- DLQ -------------------------------------------------------------------

async function failures3(tag, n = 3) {
  const ids = [];
  for (let i = 0; i < n; i++) {
    const r = await client.publish({ url: `${BASE}/fail/${tag}/${i}`, body: `f${i}`, retries: 0, label: ["dlq", tag] });
    ids.push(r.messageId);
  }
  await idle();
  const { messages } = await client.dlq.listMessages({ filter: { label: tag } });
  assert.equal(messages.length, n);
  // Delivered concurrently, they may fail in any order: by publish order.
  return messages.sort((x, y) => x.url.localeCompare(y.url));
}

test("DLQ: list in every form", async () => {
  const tag = unique();
  const msgs = await failures3(tag);
  assert.equal(msgs[0].responseStatus, 500);
  assert.equal(msgs[0].responseBody, "failing on purpose");
  assert.deepEqual(msgs[0].labels, ["dlq", tag]);

  const byIds = await client.dlq.listMessages({ dlqIds: [msgs[0].dlqId, msgs[2].dlqId] });
  assert.deepEqual(byIds.messages.map((m) => m.dlqId), [msgs[0].dlqId, msgs[2].dlqId]);
  const byUrl = await client.dlq.listMessages({ filter: { url: `${BASE}/fail/${tag}/1` } });
  assert.deepEqual(byUrl.messages.map((m) => m.dlqId), [msgs[1].dlqId]);
  const byStatus = await client.dlq.listMessages({ filter: { label: tag, responseStatus: 500 } });
  assert.equal(byStatus.messages.length, 3);
  const none = await client.dlq.listMessages({ filter: { label: tag, responseStatus: 404 } });
  assert.equal(none.messages.length, 0);
  const since = await client.dlq.listMessages({ filter: { label: tag, fromDate: Date.now() + 60_000 } });
  assert.equal(since.messages.length, 0);
  const page1 = await client.dlq.listMessages({ count: 2, filter: { label: tag } });
  assert.equal(page1.messages.length, 2);
  assert.ok(page1.cursor);
  const page2 = await client.dlq.listMessages({ count: 2, cursor: page1.cursor, filter: { label: tag } });
  assert.equal(page2.messages.length, 1);
  assert.equal(page2.cursor, undefined);
  await client.dlq.delete({ filter: { label: tag } });
});

test("DLQ: retry in every form", async () => {
  const tag = unique();
  let msgs = await failures3(tag, 4);
  const one = await client.dlq.retry(msgs[0].dlqId);
  assert.equal(one.responses.length, 1);
  assert.match(one.responses[0].messageId, /^msg_/);
  const arr = await client.dlq.retry([msgs[1].dlqId, msgs[2].dlqId]);
  assert.equal(arr.responses.length, 2);
  const obj = await client.dlq.retry({ dlqIds: [msgs[3].dlqId] });
  assert.equal(obj.responses.length, 1);
  await idle();
  // They failed again, under new dlqIds.
  msgs = (await client.dlq.listMessages({ filter: { label: tag } })).messages;
  assert.equal(msgs.length, 4);
  const byFilter = await client.dlq.retry({ filter: { url: `${BASE}/fail/${tag}/0` } });
  assert.equal(byFilter.responses.length, 1);
  await idle();
  const all = await client.dlq.retry({ all: true, count: 100 });
  assert.ok(all.responses.length >= 4);
  await idle();
  assert.deepEqual(await client.dlq.retry([]), { responses: [] });
  await client.dlq.delete({ all: true });
});

test("DLQ: delete in every form", async () => {
  const tag = unique();
  const msgs = await failures3(tag, 5);
  assert.deepEqual(await client.dlq.delete(msgs[0].dlqId), { deleted: 1 });
  assert.equal((await client.dlq.delete([msgs[1].dlqId, msgs[2].dlqId])).deleted, 2);
  assert.equal((await client.dlq.delete({ dlqIds: [msgs[3].dlqId] })).deleted, 1);
  assert.equal((await client.dlq.deleteMany({ dlqIds: [msgs[4].dlqId] })).deleted, 1);
  assert.equal((await client.dlq.listMessages({ filter: { label: tag } })).messages.length, 0);
  await failures3(tag, 2);
  assert.equal((await client.dlq.delete({ filter: { label: tag } })).deleted, 2);
  await failures3(tag, 3);
  let cursor;
  let deleted = 0;
  do {
    const r = await client.dlq.delete({ all: true, count: 2, cursor });
    deleted += r.deleted;
    cursor = r.cursor;
  } while (cursor);
  assert.ok(deleted >= 3);
  assert.equal((await client.dlq.listMessages()).messages.length, 0);
  assert.deepEqual(await client.dlq.delete([]), { deleted: 0 });
});

// --- logs ------------------------------------------------------------------

test("logs with every filter", async () => {
  const tag = unique();
  const q = `lq-${tag}`.replaceAll(/[^A-Za-z0-9._-]/g, "_");
  const a = await client.publish({ url: `${BASE}/logs/${tag}/a`, body: "a", label: ["la", tag], flowControl: { key: `lk-${tag}`, parallelism: 5 } });
  const b = await client.publish({ url: `${BASE}/logs/${tag}/b`, body: "b", label: ["lb", tag] });
  const c = await client.queue({ queueName: q }).enqueue({ url: `${BASE}/logs/${tag}/c`, body: "c", label: tag });
  const group = `lg-${tag}`.replaceAll(/[^A-Za-z0-9._-]/g, "_");
  await client.urlGroups.addEndpoints({ name: group, endpoints: [{ url: `${BASE}/logs/${tag}/g` }] });
  const [g] = await client.publish({ urlGroup: group, body: "g", label: tag });
  const from = Date.now() - 60_000;
  await idle();
  const ids = (r) => [...new Set(r.logs.map((l) => l.messageId))].sort();

  let r = await client.logs({ messageIds: [a.messageId, c.messageId] });
  assert.deepEqual(ids(r), [a.messageId, c.messageId].sort());
  assert.deepEqual(r.events, r.logs);
  r = await client.logs({ filter: { label: tag, state: "DELIVERED" } });
  assert.deepEqual(ids(r), [a.messageId, b.messageId, c.messageId, g.messageId].sort());
  assert.ok(r.logs.every((l) => l.state === "DELIVERED"));
  r = await client.logs({ filter: { label: ["la", "lb"] } });
  assert.deepEqual(ids(r), [a.messageId, b.messageId].sort());
  r = await client.logs({ filter: { url: `${BASE}/logs/${tag}/b` } });
  assert.deepEqual(ids(r), [b.messageId]);
  r = await client.logs({ filter: { queueName: q } });
  assert.deepEqual(ids(r), [c.messageId]);
  r = await client.logs({ filter: { urlGroup: group } });
  assert.deepEqual(ids(r), [g.messageId]);
  assert.equal(r.logs[0].urlGroup, group);
  r = await client.logs({ filter: { flowControlKey: `lk-${tag}` } });
  assert.deepEqual(ids(r), [a.messageId]);
  r = await client.logs({ filter: { label: tag, callerIp: "127.0.0.1" } });
  assert.equal(ids(r).length, 4);
  r = await client.logs({ filter: { label: tag, path: [`/logs/${tag}/a`, `/logs/${tag}/c`] } });
  assert.deepEqual(ids(r), [a.messageId, c.messageId].sort());
  r = await client.logs({ filter: { label: tag, host: new URL(BASE).host } });
  assert.equal(ids(r).length, 4);
  r = await client.logs({ filter: { label: tag, fromDate: from, toDate: Date.now() + 60_000 } });
  assert.equal(ids(r).length, 4);
  r = await client.logs({ filter: { label: tag, toDate: from } });
  assert.equal(r.logs.length, 0);
  r = await client.logs({ filter: { messageId: b.messageId } });
  assert.deepEqual(ids(r), [b.messageId]);
  assert.deepEqual(r.logs.map((l) => l.state), ["DELIVERED", "ACTIVE", "CREATED"], "newest first");
  r = await client.logs({ count: 2, filter: { label: tag } });
  assert.equal(r.logs.length, 2);
  assert.ok(r.cursor);
  const next = await client.logs({ count: 100, cursor: r.cursor, filter: { label: tag } });
  assert.equal(next.logs.length, 12 - 2);
  // CANCELED is the SDK's spelling; the log says CANCELLED, as QStash does.
  const [x] = await delayed(1, { label: tag });
  await client.messages.cancel(x);
  r = await client.events({ filter: { label: tag, state: "CANCELED" } });
  assert.deepEqual(r.logs.map((l) => l.state), ["CANCELLED"]);
  await client.urlGroups.delete(group);
});

// --- schedules (on the fake clock) -----------------------------------------

test("schedules: create, get, list, pause, resume, runs, delete", async () => {
  const tag = unique();
  const { scheduleId } = await sched.schedules.create({
    destination: `${BASE}/sched/${tag}`,
    cron: "* * * * *",
    body: JSON.stringify({ run: tag }),
    headers: { "X-Job": "drain" },
    retries: 1,
    label: ["cron", tag],
  });
  assert.match(scheduleId, /^scd_/);
  let s = await sched.schedules.get(scheduleId);
  assert.equal(s.cron, "* * * * *");
  assert.equal(s.destination, `${BASE}/sched/${tag}`);
  assert.equal(s.isPaused, false);
  assert.equal(s.retries, 1);
  assert.deepEqual(s.labels, ["cron", tag]);
  assert.ok(s.nextScheduleTime > s.createdAt);
  assert.ok((await sched.schedules.list()).some((x) => x.scheduleId === scheduleId));

  await control(`/tick?at=${s.nextScheduleTime}`);
  await idle("sched");
  let runs = received(`/sched/${tag}`);
  assert.equal(runs.length, 1);
  assert.equal(runs[0].headers["upstash-schedule-id"], scheduleId);
  assert.equal(runs[0].headers["x-job"], "drain");
  assert.deepEqual(JSON.parse(runs[0].body), { run: tag });
  s = await sched.schedules.get(scheduleId);
  assert.deepEqual(Object.values(s.lastScheduleStates), ["SUCCESS"]);
  const logs = await sched.logs({ filter: { scheduleId, state: "DELIVERED" } });
  assert.equal(logs.logs.length, 1);

  await sched.schedules.pause({ schedule: scheduleId });
  assert.equal((await sched.schedules.get(scheduleId)).isPaused, true);
  await control(`/tick?at=${s.nextScheduleTime}`);
  await idle("sched");
  assert.equal(received(`/sched/${tag}`).length, 1, "a paused schedule skips its runs");
  await sched.schedules.resume({ schedule: scheduleId });
  s = await sched.schedules.get(scheduleId);
  await control(`/tick?at=${s.nextScheduleTime}`);
  await idle("sched");
  assert.equal(received(`/sched/${tag}`).length, 2);

  // CRON_TZ: 09:00 in New York is 13:00 or 14:00 UTC.
  const tz = await sched.schedules.create({ destination: `${BASE}/sched/${tag}/tz`, cron: "CRON_TZ=America/New_York 0 9 * * *" });
  const next = new Date((await sched.schedules.get(tz.scheduleId)).nextScheduleTime);
  assert.equal(next.getUTCMinutes(), 0);
  assert.ok([13, 14].includes(next.getUTCHours()), `next run ${next.toISOString()}`);

  await sched.schedules.delete(scheduleId);
  await sched.schedules.delete(tz.scheduleId);
  await assert.rejects(sched.schedules.get(scheduleId), /not found/);
});

// --- flow control ----------------------------------------------------------

test("flow control: get, pause, resume, pin, unpin, resetRate, global parallelism", async () => {
  const key = `fk-${unique()}`;
  await client.flowControl.pause(key);
  for (let i = 0; i < 3; i++) {
    await client.publish({ url: `${BASE}/fc/${key}/${i}`, body: "x", flowControl: { key, parallelism: 1, rate: 5, period: 60 } });
  }
  let info = await client.flowControl.get(key);
  assert.equal(info.flowControlKey, key);
  assert.equal(info.isPaused, true);
  assert.equal(info.waitListSize, 3);
  assert.equal(info.parallelismMax, 1);
  assert.equal(info.rateMax, 5);
  assert.equal(info.ratePeriod, 60);
  assert.equal(received(`/fc/${key}/`).length, 0);

  await client.flowControl.pin(key, { parallelism: 3, rate: 2, period: 3600 });
  info = await client.flowControl.get(key);
  assert.equal(info.isPinnedParallelism, true);
  assert.equal(info.isPinnedRate, true);
  assert.equal(info.parallelismMax, 3);
  await client.flowControl.resume(key);
  await waitUntil(async () => received(`/fc/${key}/`).length === 2 && (await client.flowControl.get(key)).waitListSize === 1);
  info = await client.flowControl.get(key);
  assert.equal(info.rateCount, 2, "the pinned rate holds the third");
  await client.flowControl.resetRate(key);
  await idle();
  assert.equal(received(`/fc/${key}/`).length, 3);
  await client.flowControl.unpin(key, { parallelism: true, rate: true });
  info = await client.flowControl.get(key);
  assert.equal(info.isPinnedParallelism, false);
  assert.equal(info.isPinnedRate, false);

  const global = await client.flowControl.getGlobalParallelism();
  assert.ok(global.parallelismMax > 0);
  assert.equal(typeof global.parallelismCount, "number");
});

async function waitUntil(cond) {
  const deadline = Date.now() + 10_000;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, "condition not met within 10s");
    await new Promise((r) => setTimeout(r, 20));
  }
}

// --- keys, dev mode, regions, and the Receiver -----------------------------

test("keys and dev mode", async () => {
  // Client({devMode: true}) talks to 127.0.0.1:QSTASH_DEV_PORT with the
  // dev server's credentials, after checking GET /v2/keys.
  const dev = new Client({ devMode: true, retry: false });
  const r = await dev.publish({ url: `${BASE}/devmode`, body: "dev" });
  assert.match(r.messageId, /^msg_/);
  await idle();
  assert.equal(received("/devmode").length, 1);
  const devReceiver = new Receiver({ devMode: true });
  const d = received("/devmode")[0];
  assert.equal(await devReceiver.verify({ signature: d.headers["upstash-signature"], body: d.body, url: `${BASE}/devmode` }), true);
});

test("multi-region: the Receiver picks keys by upstash-region", async () => {
  // The SDK reads region keys from the environment when QSTASH_REGION is set.
  process.env.QSTASH_REGION = "US_EAST_1";
  process.env.US_EAST_1_QSTASH_CURRENT_SIGNING_KEY = env.US_CURRENT_SIGNING_KEY;
  process.env.US_EAST_1_QSTASH_NEXT_SIGNING_KEY = env.US_NEXT_SIGNING_KEY;
  process.env.EU_CENTRAL_1_QSTASH_CURRENT_SIGNING_KEY = env.QSTASH_CURRENT_SIGNING_KEY;
  process.env.EU_CENTRAL_1_QSTASH_NEXT_SIGNING_KEY = env.QSTASH_NEXT_SIGNING_KEY;
  regionReceiver = new Receiver();
  await us.publish({ url: `${BASE}/us/one`, body: "from us" });
  await client.publish({ url: `${BASE}/us/two`, body: "from eu" });
  await idle("us");
  await idle();
  const [one] = received("/us/one");
  const [two] = received("/us/two");
  assert.equal(one.headers["upstash-region"], "US-EAST-1");
  assert.equal(two.headers["upstash-region"], "EU-CENTRAL-1");
  assert.equal(one.verified, true, one.error);
  assert.equal(two.verified, true, two.error);
  // The US token under the EU region's name does not verify.
  await assert.rejects(regionReceiver.verify({ signature: one.headers["upstash-signature"], body: one.body, url: `${BASE}/us/one`, upstashRegion: "EU-CENTRAL-1" }));
});

test("every delivery verified with the SDK's Receiver", () => {
  assert.ok(deliveries.length > 40, `only ${deliveries.length} deliveries`);
  assert.deepEqual(failures.map((d) => `${d.path}: ${d.error}`), []);
});
