'use strict'
/*
 * Drives the official Node.js NSQ client, nsqjs, against an nsqd, for
 * tests/interop/test_nsqjs.py. Every line on stdout is one JSON event
 * ({"event": NAME, ...}); diagnostics go to stderr. Exit codes: 0 success,
 * 2 an nsqjs error or failed callback, 3 timeout, 4 the connection did not
 * close cleanly, 64 bad usage.
 *
 *   node nsqjs_script.js writer --host H --port P --topic T --count N
 *        [--mpub-batch B] [--defer-ms D] [--pad P] [--hold-stdin] [--timeout S]
 *     A Writer publishes N messages "msg-0".."msg-<N-1>" (with --pad P > 0,
 *     longer ones: see makeBody): the first half one by
 *     one (PUB), the rest as arrays of up to B (MPUB); with --defer-ms D > 0 one
 *     more message "deferred" goes out with deferPublish (DPUB). Prints "done"
 *     once every callback has reported success.
 *
 *   node nsqjs_script.js reader --host H --port P --topic T --channel C
 *        --count N [--max-in-flight M] [--requeue] [--hold-stdin] [--timeout S]
 *     A Reader (nsqdTCPAddresses) finishes N distinct messages, printing a
 *     "message" event for each delivery it finishes. With --requeue, a
 *     delivery with attempts == 1 is requeued with delay 0 (no backoff) and
 *     reported as a "requeue" event; later attempts are finished.
 *
 * With --lookupd H:P (may be repeated) the Reader discovers nsqds through
 * those nsqlookupds (lookupdHTTPAddresses, polled every --lookupd-poll S
 * seconds) instead of --host/--port.
 *
 * With --hold-stdin the client stays connected after "done" until stdin is
 * closed (so the test can inspect /stats), then closes and prints "closed".
 *
 * Negotiated features (both modes), as nsqjs connection options:
 *   --snappy                  snappy: true (the optional snappystream module)
 *   --deflate                 deflate: true (--deflate-level L: deflateLevel)
 *   --tls                     tls: true
 *   --tls-ca FILE             tls: true, ca: <FILE's contents>
 *   --tls-cert F --tls-key K  cert/key: a client certificate
 *   --no-tls-verify           tlsVerification: false
 *   --auth-secret S           authSecret: S
 * The "ready" event carries the IDENTIFY answer ("identify") and the AUTH
 * answer ("auth", null without AUTH). An error nsqjs reports (an error
 * frame such as E_UNAUTHORIZED, a failed TLS handshake) ends the run with
 * status 2 and an "error" event whose "message" has the text.
 */

// nsqjs is resolved from NODE_PATH (the cached node_modules) or next to this file.
const crypto = require('crypto')
const fs = require('fs')
const nsq = require('nsqjs')
const nsqjsVersion = require('nsqjs/package.json').version

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({event, ...fields}) + '\n')
}

function fail(code, message) {
  emit('error', {message: String(message), code})
  process.stderr.write(`nsqjs_script: ${message}\n`)
  process.exit(code)
}

function parseArgs(argv) {
  const [mode, ...rest] = argv
  const opts = {
    mode,
    host: '127.0.0.1',
    port: 4150,
    topic: null,
    channel: null,
    count: 1,
    mpubBatch: 10,
    deferMs: 0,
    pad: 0,
    maxInFlight: 1,
    requeue: false,
    holdStdin: false,
    timeout: 30,
    lookupd: [],
    lookupdPoll: 60,
    snappy: false,
    deflate: false,
    deflateLevel: null,
    tls: false,
    tlsCa: null,
    tlsCert: null,
    tlsKey: null,
    noTlsVerify: false,
    authSecret: null,
  }
  const flags = {
    '--requeue': 'requeue',
    '--hold-stdin': 'holdStdin',
    '--snappy': 'snappy',
    '--deflate': 'deflate',
    '--tls': 'tls',
    '--no-tls-verify': 'noTlsVerify',
  }
  const valued = {
    '--host': ['host', String],
    '--port': ['port', Number],
    '--topic': ['topic', String],
    '--channel': ['channel', String],
    '--count': ['count', Number],
    '--mpub-batch': ['mpubBatch', Number],
    '--defer-ms': ['deferMs', Number],
    '--pad': ['pad', Number],
    '--max-in-flight': ['maxInFlight', Number],
    '--timeout': ['timeout', Number],
    '--lookupd-poll': ['lookupdPoll', Number],
    '--deflate-level': ['deflateLevel', Number],
    '--tls-ca': ['tlsCa', String],
    '--tls-cert': ['tlsCert', String],
    '--tls-key': ['tlsKey', String],
    '--auth-secret': ['authSecret', String],
  }
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]
    if (flags[arg]) {
      opts[flags[arg]] = true
    } else if (arg === '--lookupd' && i + 1 < rest.length) {
      opts.lookupd.push(rest[++i])
    } else if (valued[arg] && i + 1 < rest.length) {
      const [key, conv] = valued[arg]
      opts[key] = conv(rest[++i])
      if (typeof opts[key] === 'number' && Number.isNaN(opts[key])) {
        fail(64, `bad value for ${arg}: ${rest[i]}`)
      }
    } else {
      fail(64, `unknown or incomplete argument: ${arg}`)
    }
  }
  if (!['writer', 'reader'].includes(mode)) fail(64, `unknown mode: ${mode}`)
  if (!opts.topic) fail(64, '--topic is required')
  if (mode === 'reader' && !opts.channel) fail(64, '--channel is required')
  return opts
}

// Body i: "msg-<i>", then with pad > 0 a dash and pad hex digits (sha256
// of "<i>-<j>", j = 0, 1, ...): the same as make_body in pynsq_script.py.
function makeBody(i, pad) {
  let body = `msg-${i}`
  if (pad > 0) {
    let digits = ''
    for (let j = 0; digits.length < pad; j++) {
      digits += crypto.createHash('sha256').update(`${i}-${j}`).digest('hex')
    }
    body += '-' + digits.slice(0, pad)
  }
  return body
}

// nsqjs connection options for the negotiated features asked for.
function featureOptions(opts) {
  const o = {}
  if (opts.snappy) o.snappy = true
  if (opts.deflate) o.deflate = true
  if (opts.deflateLevel !== null) o.deflateLevel = opts.deflateLevel
  if (opts.tls || opts.tlsCa || opts.tlsCert || opts.noTlsVerify) o.tls = true
  if (opts.tlsCa) o.ca = fs.readFileSync(opts.tlsCa)
  if (opts.tlsCert) o.cert = fs.readFileSync(opts.tlsCert)
  if (opts.tlsKey) o.key = fs.readFileSync(opts.tlsKey)
  if (opts.noTlsVerify) o.tlsVerification = false
  if (opts.authSecret !== null) o.authSecret = opts.authSecret
  return o
}

function startTimeout(opts) {
  return setTimeout(
    () => fail(3, `timed out after ${opts.timeout}s in ${opts.mode} mode`),
    opts.timeout * 1000
  )
}

// Resolves when stdin reaches EOF (immediately unless --hold-stdin).
function released(opts) {
  if (!opts.holdStdin) return Promise.resolve()
  return new Promise((resolve) => {
    process.stdin.on('end', resolve)
    process.stdin.on('close', resolve)
    process.stdin.resume()
  })
}

// Once the client is told to close, give it a few seconds to do so.
function closeDeadline() {
  return setTimeout(() => fail(4, 'connection did not close within 5s'), 5000)
}

function runWriter(opts) {
  const timer = startTimeout(opts)
  const w = new nsq.Writer(opts.host, opts.port, featureOptions(opts))
  let closing = false
  let started = false

  w.on('error', (err) => fail(2, `writer error: ${err && err.message ? err.message : err}`))
  w.on('closed', () => {
    if (!closing) fail(2, 'writer connection closed unexpectedly')
    emit('closed')
    clearTimeout(timer)
    process.exit(0)
  })

  w.on('ready', () => {
    if (started) return
    started = true
    emit('ready', {
      nsqjs: nsqjsVersion,
      identify: w.conn.statemachine.identifyResponse,
      auth: w.conn.auth || null,
    })

    const bodies = Array.from({length: opts.count}, (_, i) => makeBody(i, opts.pad))
    const singles = bodies.slice(0, Math.floor(opts.count / 2))
    const batches = []
    for (let i = singles.length; i < bodies.length; i += opts.mpubBatch) {
      batches.push(bodies.slice(i, i + opts.mpubBatch))
    }

    const expected = singles.length + batches.length + (opts.deferMs > 0 ? 1 : 0)
    const acked = {pub: 0, mpub: 0, dpub: 0}
    let total = 0
    const callback = (kind, n) => (err) => {
      if (err) fail(2, `${kind} callback error: ${err.message || err}`)
      acked[kind] += 1
      total += 1
      if (total === expected) {
        emit('done', {
          pub: acked.pub,
          mpub: acked.mpub,
          dpub: acked.dpub,
          messages: opts.count + acked.dpub,
        })
        released(opts).then(() => {
          closing = true
          closeDeadline()
          w.close()
        })
      }
    }

    // Everything is pipelined: nsqjs matches each OK to the oldest callback.
    for (const body of singles) w.publish(opts.topic, body, callback('pub'))
    for (const batch of batches) w.publish(opts.topic, batch, callback('mpub'))
    if (opts.deferMs > 0) {
      // nsqjs 0.13.0's deferPublish hands `msg` to produceMessages unwrapped,
      // which throws "Expect an array of messages" for a plain string (a client
      // bug, lib/writer.js); a one-element array goes out as a single DPUB.
      w.deferPublish(opts.topic, ['deferred'], opts.deferMs, callback('dpub'))
    }
  })

  w.connect()
}

function runReader(opts) {
  const timer = startTimeout(opts)
  // The Reader keeps its NSQDConnections to itself; note them as they come,
  // to report what nsqd answered to IDENTIFY.
  const conns = []
  class TracingReader extends nsq.Reader {
    registerConnectionListeners(conn) {
      conns.push(conn)
      return super.registerConnectionListeners(conn)
    }
  }
  const where = opts.lookupd.length
    ? {lookupdHTTPAddresses: opts.lookupd, lookupdPollInterval: opts.lookupdPoll}
    : {nsqdTCPAddresses: [`${opts.host}:${opts.port}`]}
  const r = new TracingReader(opts.topic, opts.channel, {
    ...where,
    ...featureOptions(opts),
    maxInFlight: opts.maxInFlight,
  })
  const finished = new Set()
  let closing = false
  let done = false

  r.on('error', (err) => fail(2, `reader error: ${err && err.message ? err.message : err}`))
  r.on('nsqd_closed', () => {
    if (!closing) fail(2, 'reader connection closed unexpectedly')
  })
  r.on('not_ready', () => {
    if (!closing) return
    emit('closed')
    clearTimeout(timer)
    process.exit(0)
  })
  r.on('ready', () => {
    emit('ready', {
      nsqjs: nsqjsVersion,
      identify: conns.length ? conns[0].statemachine.identifyResponse : null,
      auth: conns.length ? conns[0].auth || null : null,
    })
  })

  r.on('message', (msg) => {
    const body = msg.body.toString()
    const fields = {body, attempts: msg.attempts, id: msg.id}
    if (opts.requeue && msg.attempts === 1) {
      emit('requeue', fields)
      msg.requeue(0, false)
      return
    }
    emit('message', fields)
    msg.finish()
    finished.add(body)
    if (!done && finished.size >= opts.count) {
      done = true
      emit('done', {received: finished.size})
      released(opts).then(() => {
        // Let the last FIN leave before CLS (FIN is written on nextTick).
        setImmediate(() => {
          closing = true
          closeDeadline()
          r.close()
        })
      })
    }
  })

  r.connect()
}

process.on('uncaughtException', (err) => fail(2, `uncaught: ${err && err.stack ? err.stack : err}`))
process.on('unhandledRejection', (err) => fail(2, `unhandled rejection: ${err && err.stack ? err.stack : err}`))

const opts = parseArgs(process.argv.slice(2))
if (opts.mode === 'writer') runWriter(opts)
else runReader(opts)
