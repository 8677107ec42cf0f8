// The attack suite: every attack docs/SECURITY.md names, run as an
// outsider, a hostile tenant (root inside its own sandbox) and a read-only
// Kubernetes user would, through real clients — the unmodified e2b SDK,
// raw HTTP with hand-set headers (node:http: fetch drops Connection),
// kubectl with the read-only kubeconfig, and commands run as root inside
// the sandbox. Each test passes only while its attack is refused.
// hack/test.d/70-hostile.sh starts sandbox-dev and runs it.
//
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the SDK's own),
// HEARTH_E2B_KEY_OTHER (a key of another namespace), HEARTH_TEMPLATE,
// HEARTH_DATA_DIR (sandbox-dev's data dir), HEARTH_KUBECONFIG,
// HEARTH_KUBECONFIG_READONLY, HEARTH_E2B_DOMAIN, HEARTH_DISK_MIB (the
// sandboxes' disk size, sandbox-dev --disk-size), HEARTH_VMM (sim|qemu),
// HEARTH_SPARSE (the sparse file size of the snapshot attack; default 10T).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import crypto from 'node:crypto'
import { execFileSync, spawn } from 'node:child_process'
import { Sandbox } from 'e2b'

const env = process.env
const template = env.HEARTH_TEMPLATE
const dataDir = env.HEARTH_DATA_DIR
const vmm = env.HEARTH_VMM || 'sim'
const sim = vmm === 'sim'
const domain = env.HEARTH_E2B_DOMAIN || ''
const diskMiB = Number(env.HEARTH_DISK_MIB || 0)
const gw = new URL(env.E2B_API_URL)
const key = env.E2B_API_KEY
const kubeconfig = env.HEARTH_KUBECONFIG
const kubeconfigRO = env.HEARTH_KUBECONFIG_READONLY

// ---- clients ----

// raw sends one HTTP/1.1 request with exactly the headers given (Connection
// included), on a fresh connection, to the gateway unless opts.url says
// otherwise; it resolves to {status, headers, body}.
function raw(method, pathAndQuery, headers = {}, body = undefined, opts = {}) {
  const u = opts.url ? new URL(opts.url) : gw
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: pathAndQuery, headers, agent: false, setHost: !('Host' in headers || 'host' in headers) }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.setTimeout(60_000, () => req.destroy(new Error(`${method} ${pathAndQuery}: no answer in 60 s`)))
    req.on('error', reject)
    if (body !== undefined) req.write(body)
    req.end()
  })
}

function kubectl(args, { config = kubeconfig, input } = {}) {
  try {
    const out = execFileSync('kubectl', ['--kubeconfig', config, ...args], { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] })
    return { code: 0, out, err: '' }
  } catch (e) {
    return { code: e.status ?? 1, out: e.stdout || '', err: e.stderr || String(e) }
  }
}

function tokenOf(kubeconfigPath) {
  const m = fs.readFileSync(kubeconfigPath, 'utf8').match(/token:\s*(\S+)/)
  assert.ok(m, `no token in ${kubeconfigPath}`)
  return m[1]
}

async function pollUntil(what, cond, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

async function withSandbox(fn, opts = {}) {
  const sbx = await Sandbox.create(template, { timeoutMs: 300_000, ...opts })
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

// run runs cmd in the sandbox (as root with asRoot), never throwing on a
// non-zero exit: callers assert on exitCode.
async function run(sbx, cmd, { asRoot = false, timeoutMs = 120_000 } = {}) {
  try {
    return await sbx.commands.run(cmd, { timeoutMs, ...(asRoot ? { user: 'root' } : {}) })
  } catch (e) {
    if (e && typeof e.exitCode === 'number') return e
    throw e
  }
}

// tokenOfSandbox is the sandbox's envd access token as the API gives it.
async function tokenOfSandbox(sbx) {
  const r = await raw('GET', `/sandboxes/${sbx.sandboxId}`, { 'X-API-KEY': key })
  assert.equal(r.status, 200, r.body)
  return JSON.parse(r.body).envdAccessToken
}

// A host secret a guest must never read: a 0600 root file under a
// directory of its own, with random content.
function hostCanary(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `hearth-hostile-${tag}-`))
  const secret = `hearth-canary-${crypto.randomBytes(12).toString('hex')}`
  fs.writeFileSync(path.join(dir, 'secret'), secret + '\n', { mode: 0o600 })
  fs.chmodSync(dir, 0o700)
  const st = () => {
    const d = fs.statSync(dir), f = fs.statSync(path.join(dir, 'secret'))
    return JSON.stringify([d.uid, d.gid, d.mode, f.uid, f.gid, f.mode, fs.readFileSync(path.join(dir, 'secret'), 'utf8'), fs.readdirSync(dir).sort()])
  }
  return { dir, file: path.join(dir, 'secret'), secret, state: st(), stateNow: st, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

function hostMountinfo() {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8')
}

// Every way the gateway can be reached: by headers, and by host name as
// e2b's cloud is (<port>-<id>.<domain>).
function addressing(id, port) {
  const ways = [{ name: 'headers', headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(port) } }]
  if (domain) ways.push({ name: 'host', headers: { Host: `${port}-${id}.${domain}` } })
  return ways
}

// The headers Hearth's hops use internally, and those that carry identity
// or routing: each one named in Connection must change nothing.
const internalHeaders = [
  'X-Hearth-Forward-Port', 'X-Hearth-Forward-Token', 'X-Hearth-Sandbox-Id', 'X-Hearth-Port-Closed',
  'X-Access-Token', 'E2b-Sandbox-Id', 'E2b-Sandbox-Port', 'E2b-Traffic-Access-Token', 'Authorization',
  'X-Sandbox-ID', 'X-Sandbox-Namespace', 'X-Sandbox-Port',
  'x-hearth-forward-port', 'X-HEARTH-FORWARD-PORT',
]
const connectionValues = [
  ...internalHeaders,
  'close, X-Hearth-Forward-Port',
  'keep-alive, x-hearth-forward-port',
  'X-Hearth-Forward-Port, X-Access-Token, X-Hearth-Sandbox-Id',
  'Upgrade, X-Hearth-Forward-Port',
]

// connectStart is a Connect server-streaming request body running cmd
// (envd's process.Process/Start), enveloped as the SDK sends it.
function connectStart(cmd) {
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', cmd] } }))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(msg.length, 1)
  return Buffer.concat([head, msg])
}

// agentProbes are requests that, reaching the agent's own API, would give
// the caller the sandbox: its token file, and code run as root. Each
// answer must be a refusal that shows neither.
function agentProbes() {
  return [
    { method: 'GET', path: '/files?path=%2F.hearth%2Ftoken&username=root', body: undefined, headers: {} },
    { method: 'POST', path: '/process.Process/Start', body: connectStart('echo pwned-$(id -u)'), headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' } },
    { method: 'POST', path: '/hearth/identity', body: JSON.stringify({ token: 'attacker-token' }), headers: { 'Content-Type': 'application/json' } },
    // The node's opening of a held agent (after the sandbox's egress
    // policy is in): a caller that could send it would run before its filter.
    { method: 'POST', path: '/hearth/open', body: JSON.stringify({ envVars: {} }), headers: { 'Content-Type': 'application/json' } },
  ]
}

function assertRefused(r, token, what) {
  assert.ok(r.status < 200 || r.status >= 300, `${what}: answered ${r.status}: ${r.body.slice(0, 200)}`)
  assert.ok(!r.body.includes('pwned-'), `${what}: ran code: ${r.body.slice(0, 200)}`)
  if (token) assert.ok(!r.body.includes(token), `${what}: leaked the sandbox token`)
}

// ---- 1. Outsider: internal headers named in Connection ----

test('attack: an internal header named in Connection cannot reach the agent API through a public port', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    for (const way of addressing(sbx.sandboxId, 8080)) {
      for (const conn of connectionValues) {
        for (const p of agentProbes()) {
          const headers = { ...way.headers, ...p.headers, Connection: conn, Authorization: 'Basic cm9vdDo=' }
          // The named header itself, as an attacker would also send it.
          const named = conn.split(',').map((s) => s.trim()).filter((s) => !/^(close|keep-alive|upgrade)$/i.test(s))
          for (const n of named) if (!(n in headers)) headers[n] = /port/i.test(n) ? '8080' : 'x'
          const r = await raw(p.method, p.path, headers, p.body)
          assertRefused(r, token, `${way.name} Connection: ${conn} ${p.method} ${p.path}`)
        }
      }
    }
    // The sandbox still answers its own token.
    assert.equal((await run(sbx, 'echo ok')).stdout.trim(), 'ok')
  })
})

test('attack: a private sandbox opened by its traffic token alone never reaches the agent API', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    assert.ok(sbx.trafficAccessToken, 'a private sandbox has a traffic access token')
    for (const way of addressing(sbx.sandboxId, 8080)) {
      for (const conn of connectionValues) {
        for (const p of agentProbes()) {
          const headers = { ...way.headers, ...p.headers, Connection: conn, 'E2b-Traffic-Access-Token': sbx.trafficAccessToken, 'X-Hearth-Forward-Port': '8080' }
          const r = await raw(p.method, p.path, headers, p.body)
          assertRefused(r, token, `traffic token, ${way.name} Connection: ${conn} ${p.path}`)
        }
      }
    }
  }, { network: { allowPublicTraffic: false } })
})

test('attack: the traffic token and a router port forward run no code in the code interpreter', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    const code = JSON.stringify({ code: 'print("pwned-" + "x")' })
    for (const way of addressing(sbx.sandboxId, 49999)) {
      for (const conn of [undefined, 'X-Hearth-Forward-Token', 'X-Hearth-Forward-Port', 'X-Access-Token']) {
        const headers = { ...way.headers, 'Content-Type': 'application/json', 'E2b-Traffic-Access-Token': sbx.trafficAccessToken, ...(conn ? { Connection: conn } : {}) }
        const r = await raw('POST', '/execute', headers, code)
        assertRefused(r, token, `traffic token, ${way.name}, Connection: ${conn} POST /execute`)
        assert.equal(r.status, 401, `traffic token, ${way.name}: ${r.status} ${r.body.slice(0, 200)}`)
      }
      // What @e2b/code-interpreter sends with the traffic token alone still works.
      const ctx = await raw('GET', '/contexts', { ...way.headers, 'E2b-Traffic-Access-Token': sbx.trafficAccessToken })
      assert.equal(ctx.status, 200, `context list with the traffic token: ${ctx.status} ${ctx.body.slice(0, 200)}`)
      // The sandbox token runs code.
      const ok = await raw('POST', '/execute', { ...way.headers, 'Content-Type': 'application/json', 'X-Access-Token': token, 'E2b-Traffic-Access-Token': sbx.trafficAccessToken }, JSON.stringify({ code: 'print("ran-" + "x")' }))
      assert.equal(ok.status, 200, ok.body)
      assert.match(ok.body, /ran-x/)
    }
  }, { network: { allowPublicTraffic: false } })
  // Through the router, port 49999 is exec, like 8888: a port-forward grant
  // is not enough (the read-only kubeconfig is refused naming exec).
  const ro = tokenOf(kubeconfigRO)
  for (const port of ['49999', '049999', '+49999']) {
    const r = await raw('POST', '/execute', { 'X-Sandbox-ID': 'any-name', 'X-Sandbox-Port': port, Authorization: `Bearer ${ro}`, 'Content-Type': 'application/json' }, JSON.stringify({ code: 'print("pwned-")' }))
    assert.equal(r.status, 403, `router port ${port}: ${r.status} ${r.body}`)
    assert.match(r.body, /sandboxes\/exec/, `router port ${port} asks for exec: ${r.body}`)
  }
})

test('attack: a signed file URL cannot be switched to another user with Authorization: Basic', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    const tag = crypto.randomBytes(4).toString('hex')
    // What sandbox.uploadUrl(name) / downloadUrl(name) sign: no user.
    const url = (name, op) => {
      const sig = 'v1_' + crypto.createHash('sha256').update(`${name}:${op}::${token}`).digest('base64').replace(/=+$/, '')
      return `/files?path=${encodeURIComponent(name)}&signature=${encodeURIComponent(sig)}`
    }
    const basicRoot = 'Basic ' + Buffer.from('root:').toString('base64')
    const find = async (name) => (await run(sbx, `find / -xdev -name ${name} 2>/dev/null; true`, { asRoot: true })).stdout.trim()
    // Where the URL's own user puts a file, and where the attack's goes.
    const plain = await raw('POST', url(`plain-${tag}`, 'write'), { 'E2b-Sandbox-Id': sbx.sandboxId, 'Content-Type': 'application/octet-stream' }, 'x')
    assert.equal(plain.status, 200, plain.body)
    const home = path.dirname(await find(`plain-${tag}`))
    const up = await raw('POST', url(`as-root-${tag}`, 'write'), { 'E2b-Sandbox-Id': sbx.sandboxId, Authorization: basicRoot, 'Content-Type': 'application/octet-stream' }, 'pwned-')
    assert.equal(up.status, 200, up.body)
    assert.equal(await find(`as-root-${tag}`), `${home}/as-root-${tag}`, 'the signed upload went elsewhere than its user\'s home')
    if (home !== '/root') {
      await run(sbx, `echo root-only > /root/read-${tag}`, { asRoot: true })
      const down = await raw('GET', url(`read-${tag}`, 'read'), { 'E2b-Sandbox-Id': sbx.sandboxId, Authorization: basicRoot })
      assert.ok(!down.body.includes('root-only'), `a signed download read root's file: ${down.status} ${down.body}`)
    }
  })
})

test('attack: a request the data plane refuses does not wake a paused autoResume sandbox', async () => {
  const sbx = await Sandbox.create(template, { timeoutMs: 300_000, lifecycle: { onTimeout: 'pause', autoResume: true }, network: { allowPublicTraffic: false } })
  try {
    const state = async () => JSON.parse((await raw('GET', `/sandboxes/${sbx.sandboxId}`, { 'X-API-KEY': key })).body).state
    const p = await raw('POST', `/sandboxes/${sbx.sandboxId}/pause`, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, '{}')
    assert.equal(p.status, 204, p.body)
    await pollUntil('the sandbox to be paused', async () => (await state()) === 'paused')
    const fake = crypto.randomBytes(24).toString('hex')
    const sig = `v1_${crypto.randomBytes(32).toString('base64').replace(/=+$/, '')}`
    for (const way of [...addressing(sbx.sandboxId, 49983), ...addressing(sbx.sandboxId, 8080)]) {
      for (const [what, headers, p] of [
        ['a fake token', { 'X-Access-Token': fake }, '/health'],
        ['a fake traffic token', { 'E2b-Traffic-Access-Token': fake }, '/'],
        ['no credential', {}, '/'],
        ['a fake signed URL', {}, `/files?path=%2Fetc%2Fhostname&signature=${encodeURIComponent(sig)}`],
      ]) {
        const r = await raw('GET', p, { ...way.headers, ...headers })
        assert.ok(r.status === 401 || r.status === 400, `${way.name} ${JSON.stringify(way.headers)}, ${what}: ${r.status} ${r.body.slice(0, 200)}`)
        assert.equal(await state(), 'paused', `${way.name} ${JSON.stringify(way.headers)}, ${what} resumed the sandbox`)
      }
    }
    // Its own traffic token wakes it.
    await raw('GET', '/', { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080', 'E2b-Traffic-Access-Token': sbx.trafficAccessToken })
    await pollUntil('the sandbox to run again', async () => (await state()) === 'running')
  } finally {
    await sbx.kill().catch(() => {})
  }
})

test('attack: client-sent internal headers (forward port, forward token, sandbox id) are not trusted', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    const forged = {
      'X-Hearth-Forward-Port': '49983',
      'X-Hearth-Forward-Token': crypto.createHmac('sha256', 'guess').update('hearth agent forward').digest('hex'),
      'X-Hearth-Sandbox-Id': 'someone-else',
    }
    for (const port of [49983, 8080, 49999]) {
      for (const p of agentProbes()) {
        const r = await raw(p.method, p.path, { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port), ...p.headers, ...forged }, p.body)
        assertRefused(r, token, `forged internal headers to port ${port} ${p.path}`)
      }
    }
  })
})

test('attack: the agent re-key endpoint is not reachable through the gateway, even with the token', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    const r = await raw('POST', '/hearth/identity', { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token, 'Content-Type': 'application/json' }, JSON.stringify({ token: 'attacker-token' }))
    assert.ok(r.status === 404 || r.status === 403, `re-key through the gateway answered ${r.status}: ${r.body}`)
    const o = await raw('POST', '/hearth/open', { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token, 'Content-Type': 'application/json' }, JSON.stringify({ envVars: {} }))
    assert.ok(o.status === 404 || o.status === 403, `the node's opening through the gateway answered ${o.status}: ${o.body}`)
    assert.equal(await tokenOfSandbox(sbx), token, 'the token changed')
    assert.equal((await run(sbx, 'echo ok')).stdout.trim(), 'ok')
  })
})

test('attack: a kubectl-created sandbox is not reachable through Connection tricks, and its ports are not public', async () => {
  const name = `hostile-${crypto.randomBytes(3).toString('hex')}`
  const manifest = JSON.stringify({
    apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, namespace: 'default' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: template, resources: { requests: { cpu: '500m', memory: '512Mi' } } }] } } },
  })
  const c = kubectl(['create', '-o', 'json', '-f', '-'], { input: manifest })
  assert.equal(c.code, 0, c.err)
  try {
    const obj = JSON.parse(c.out)
    const id = obj.metadata.annotations['sandbox.cocoonstack.io/claim-id']
    const token = obj.metadata.annotations['sandbox.cocoonstack.io/token']
    assert.ok(id && token, 'the create answer names the claim id and token')
    for (const p of agentProbes()) {
      for (const conn of ['X-Hearth-Forward-Port', 'X-Hearth-Forward-Port, X-Access-Token']) {
        const r = await raw(p.method, p.path, { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8080', Connection: conn, 'X-Hearth-Forward-Port': '8080', ...p.headers }, p.body)
        assertRefused(r, token, `kubectl sandbox Connection: ${conn} ${p.path}`)
        assert.ok([401, 403, 404].includes(r.status), `a kubectl-created sandbox's port answered ${r.status} with no credential`)
      }
    }
  } finally {
    kubectl(['delete', 'sandbox', name, '--wait=false'])
  }
})

// ---- 2. Guest root: symlinks and links at every path the host touches ----

// Each way a guest names a host file: absolute, relative climbing out,
// and through /proc's magic links.
function linkTargets(file) {
  return [
    ['absolute', file],
    ['relative', '../../../../../../../../..' + file],
    ['/proc/1/root', '/proc/1/root' + file],
    ['/proc/self/root', '/proc/self/root' + file],
  ]
}

test('attack: guest root links its token file to a host file; pause and resume never read it back', { skip: !sim && 'the host reads no guest file on this backend' }, async () => {
  const canary = hostCanary('token')
  const rootToken = fs.readFileSync(path.join(dataDir, 'root-token'), 'utf8').trim()
  try {
    for (const [kind, target] of [...linkTargets(canary.file), ['root-token', path.join(dataDir, 'root-token')]]) {
      await withSandbox(async (sbx) => {
        const r = await run(sbx, `ln -sfn '${target}' /.hearth/token && ls -l /.hearth/token`, { asRoot: true })
        assert.equal(r.exitCode, 0, `setting the link: ${r.stderr}`)
        for (const keepMemory of [false, true]) {
          assert.equal(await sbx.pause({ keepMemory }), true)
          await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
          const got = await raw('GET', `/sandboxes/${sbx.sandboxId}`, { 'X-API-KEY': key })
          assert.equal(got.status, 200, got.body)
          assert.ok(!got.body.includes(canary.secret), `${kind} link, keepMemory ${keepMemory}: the host file came back as the token`)
          assert.ok(!got.body.includes(rootToken), `${kind} link, keepMemory ${keepMemory}: the node's root token came back`)
        }
        // The sandbox still works with the token the API hands out.
        const again = await Sandbox.connect(sbx.sandboxId)
        assert.equal((await run(again, 'echo ok')).stdout.trim(), 'ok', `${kind}: the sandbox no longer answers its token`)
      })
      assert.equal(canary.stateNow(), canary.state, `${kind}: the host file changed`)
    }
  } finally {
    canary.cleanup()
  }
})

test('attack: guest root replaces every path the host touches at start with links to the host; a restart reads, writes, chowns and mounts nothing of the host', { skip: !sim && 'the host touches no guest path on this backend' }, async () => {
  const canary = hostCanary('paths')
  const before = hostMountinfo()
  try {
    const paths = ['/etc/resolv.conf', '/etc/hosts', '/etc/passwd', '/etc/group', '/run/e2b', '/dev', '/proc', '/dev/shm', '/dev/pts', '/tmp', '/home/user', '/.hearth-agent', '/etc/hostname']
    for (const [kind, target] of linkTargets(canary.dir)) {
      await withSandbox(async (sbx) => {
        // Replace each path in the writable layer by a link (mount points
        // are replaced on the layer, where the next start finds them).
        const script = paths.map((p) => `(umount -l '${p}' 2>/dev/null; rm -rf '${p}' 2>/dev/null; ln -sfn '${target}' '${p}' 2>/dev/null || true)`).join('; ')
        await run(sbx, script, { asRoot: true, timeoutMs: 60_000 }).catch(() => {})
        // A pause without memory stops the guest and starts it again on its layer.
        await sbx.pause({ keepMemory: false }).catch(() => {})
        await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 }).catch(() => {})
        const got = await raw('GET', `/sandboxes/${sbx.sandboxId}`, { 'X-API-KEY': key })
        assert.ok(!got.body.includes(canary.secret), `${kind}: the host file came back through the API`)
      })
      assert.equal(canary.stateNow(), canary.state, `${kind}: the host directory changed (content, owner or mode)`)
      const after = hostMountinfo()
      assert.ok(!after.includes(canary.dir), `${kind}: the host mounted something on ${canary.dir}`)
    }
    assert.equal(hostMountinfo().split('\n').filter((l) => l.includes(canary.dir)).length, 0)
    void before
  } finally {
    canary.cleanup()
  }
})

test('attack: links in the writable layer are copied as links by snapshot and fork, never followed on the host', async () => {
  const canary = hostCanary('copy')
  try {
    await withSandbox(async (sbx) => {
      const setup = linkTargets(canary.file).map(([kind, t], i) => `ln -sfn '${t}' /home/user/escape-${i}`).join(' && ') +
        ` && ln -sfn '${canary.dir}' /home/user/escape-dir && echo guest-data > /home/user/plain && ln /home/user/plain /home/user/plain-link`
      assert.equal((await run(sbx, setup, { asRoot: true })).exitCode, 0)
      const snap = await sbx.createSnapshot()
      try {
        const clone = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 })
        try {
          const r = await run(clone, 'cat /home/user/escape-* /home/user/escape-dir/secret 2>&1; cat /home/user/plain-link; stat -c %h /home/user/plain', { asRoot: true })
          assert.ok(!r.stdout.includes(canary.secret), 'a clone of the snapshot read the host file through a copied link')
          assert.match(r.stdout, /guest-data/)
        } finally {
          await clone.kill().catch(() => {})
        }
      } finally {
        await Sandbox.deleteSnapshot(snap.snapshotId).catch(() => {})
      }
      const [child] = await sbx.fork({ count: 1 })
      assert.ok(!(child instanceof Error), `fork: ${child}`)
      try {
        const r = await run(child, 'cat /home/user/escape-* /home/user/escape-dir/secret 2>&1', { asRoot: true })
        assert.ok(!r.stdout.includes(canary.secret), 'a fork child read the host file through a copied link')
      } finally {
        await child.kill().catch(() => {})
      }
    })
    assert.equal(canary.stateNow(), canary.state, 'snapshot or fork changed the host file (content, owner or mode)')
  } finally {
    canary.cleanup()
  }
})

// ---- 3. Read-only Kubernetes user ----

test('attack: a read-only kubeconfig gets no shell, file upload or port through the router', async () => {
  const ro = tokenOf(kubeconfigRO)
  const admin = tokenOf(kubeconfig)
  const name = `hostile-ro-${crypto.randomBytes(3).toString('hex')}`
  const manifest = JSON.stringify({
    apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, namespace: 'default' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: template, resources: { requests: { cpu: '500m', memory: '512Mi' } } }] } } },
  })
  const c = kubectl(['create', '-f', '-'], { input: manifest })
  assert.equal(c.code, 0, c.err)
  try {
    const router = (bearer, port, method, p, body, extra = {}) =>
      raw(method, p, { 'X-Sandbox-ID': name, 'X-Sandbox-Namespace': 'default', ...(port ? { 'X-Sandbox-Port': String(port) } : {}), Authorization: `Bearer ${bearer}`, ...extra }, body)
    const boundary = 'hearthboundary'
    const upload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/pwned"\r\nContent-Type: application/octet-stream\r\n\r\npwned\r\n--${boundary}--\r\n`
    const attempts = [
      ['execute', () => router(ro, 0, 'POST', '/execute', JSON.stringify({ command: 'echo pwned-$(id -u)' }), { 'Content-Type': 'application/json' })],
      ['upload', () => router(ro, 0, 'POST', '/upload', upload, { 'Content-Type': `multipart/form-data; boundary=${boundary}` })],
      ['download', () => router(ro, 0, 'GET', '/download/%2Fetc%2Fshadow')],
      ['port 8080', () => router(ro, 8080, 'GET', '/')],
      ['code interpreter', () => router(ro, 49999, 'POST', '/execute', JSON.stringify({ code: 'print("pwned-")' }), { 'Content-Type': 'application/json' })],
      ['execute, Connection trick', () => router(ro, 8080, 'POST', '/execute', JSON.stringify({ command: 'echo pwned-$(id -u)' }), { 'Content-Type': 'application/json', Connection: 'X-Hearth-Forward-Port' })],
    ]
    for (const [what, attempt] of attempts) {
      const r = await attempt()
      assert.equal(r.status, 403, `read-only ${what}: ${r.status} ${r.body.slice(0, 200)}`)
      assert.ok(!r.body.includes('pwned-'))
    }
    // The same request with the administrator's token runs: the refusal is
    // the permission, not a broken request.
    const ok = await router(admin, 0, 'POST', '/execute', JSON.stringify({ command: 'echo hi' }), { 'Content-Type': 'application/json' })
    assert.equal(ok.status, 200, ok.body)
    assert.match(ok.body, /hi/)
  } finally {
    kubectl(['delete', 'sandbox', name, '--wait=false'])
  }
})

test('attack: a read-only kubeconfig reads neither /debug/pprof nor /metrics', async () => {
  for (const p of ['/debug/pprof/', '/debug/pprof/goroutine?debug=1', '/metrics']) {
    const r = kubectl(['get', '--raw', p], { config: kubeconfigRO })
    assert.notEqual(r.code, 0, `read-only GET ${p} answered: ${r.out.slice(0, 100)}`)
    assert.match(r.err, /[Ff]orbidden/, `read-only GET ${p}: ${r.err}`)
  }
  // Discovery stays open to it.
  assert.equal(kubectl(['get', '--raw', '/version'], { config: kubeconfigRO }).code, 0)
})

// ---- 4. Disk: sparse, hard-linked and huge files; the sandbox's own bound ----

function hostBytes(dir) {
  return Number(execFileSync('du', ['-s', '-B1', '-x', dir], { encoding: 'utf8' }).split(/\s/)[0])
}

// snapshotCost takes a snapshot of sbx (or forks it), measures the host
// bytes that took, and gives them back (deletes the snapshot, kills the
// child); a 429 is a refusal that took nothing.
async function snapshotCost(sbx, kind) {
  const before = hostBytes(dataDir)
  const r = kind === 'fork'
    ? await raw('POST', `/sandboxes/${sbx.sandboxId}/fork`, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, JSON.stringify({ count: 1 }))
    : await raw('POST', `/sandboxes/${sbx.sandboxId}/snapshots`, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, '{}')
  assert.ok(r.status < 300 || r.status === 429, `${kind}: ${r.status} ${r.body}`)
  const bytes = hostBytes(dataDir) - before
  if (r.status < 300) {
    const body = JSON.parse(r.body)
    if (kind === 'fork') {
      for (const c of body.sandboxes || (Array.isArray(body) ? body : [body])) await Sandbox.kill(c.sandboxID || c.sandboxId).catch(() => {})
    } else {
      await Sandbox.deleteSnapshot(body.snapshotID || body.snapshotId).catch(() => {})
    }
  }
  return { status: r.status, bytes }
}

// What a snapshot or fork of a sandbox costs beyond one of the same
// sandbox before the attack (on a VM backend a snapshot also holds the
// guest's memory, which the baseline counts).
async function attackCost(sbx, kind, attack) {
  const base = await snapshotCost(sbx, kind)
  const a = await run(sbx, attack)
  assert.equal(a.exitCode, 0, a.stderr)
  // Written data is on the disk, not (also) in the memory checkpoint.
  await run(sbx, 'sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true', { asRoot: true })
  const c = await snapshotCost(sbx, kind)
  return { status: c.status, extra: c.bytes - base.bytes }
}

test('attack: a huge sparse file costs the host nothing through snapshot and fork (or a 429)', async () => {
  const sparse = env.HEARTH_SPARSE || '10T'
  for (const kind of ['snapshot', 'fork']) {
    await withSandbox(async (sbx) => {
      const c = await attackCost(sbx, kind, `truncate -s ${sparse} /home/user/sparse && ls -l /home/user/sparse`)
      assert.ok(c.extra < 32 << 20, `a ${kind} of a ${sparse} sparse file took ${c.extra} more host bytes (${c.status})`)
    })
  }
})

test('attack: hard links are not multiplied by a snapshot', async () => {
  await withSandbox(async (sbx) => {
    const c = await attackCost(sbx, 'snapshot', 'head -c 33554432 /dev/urandom > /home/user/blob && for i in 1 2 3 4 5 6 7 8; do ln /home/user/blob /home/user/blob-$i; done && sync')
    assert.ok(c.status < 300, `snapshot: ${c.status}`)
    assert.ok(c.extra < 56 << 20, `a snapshot of 32 MiB with 8 hard links took ${c.extra} more host bytes (9 copies would be 288 MiB)`)
  })
})

test('attack: filling the disk ends in ENOSPC inside the sandbox, not on the host; df shows the sandbox disk', { skip: !diskMiB && 'HEARTH_DISK_MIB is not set' }, async () => {
  await withSandbox(async (sbx) => {
    const df = await run(sbx, "df -B1M --output=size / | tail -1")
    const size = Number(df.stdout.trim())
    assert.ok(size > 0 && size <= diskMiB * 1.1, `df / shows ${size} MiB, want the sandbox's ${diskMiB} MiB disk, not the host's`)
    const before = hostBytes(dataDir)
    const r = await run(sbx, `dd if=/dev/zero of=/home/user/fill bs=1M count=${diskMiB + 256} 2>&1; sync`, { timeoutMs: 300_000 })
    assert.match(r.stdout + r.stderr, /No space left on device/)
    const grew = hostBytes(dataDir) - before
    assert.ok(grew < (diskMiB + 32) * (1 << 20), `filling the sandbox took ${grew} host bytes, more than its ${diskMiB} MiB disk`)
    // The sandbox lives on and can free its own space.
    assert.equal((await run(sbx, 'rm /home/user/fill && echo freed')).stdout.trim(), 'freed')
  })
})

// ---- 5. Guest root's kernel surface and resource bounds ----

test('attack: guest root cannot create namespaces, mount, or configure links; sudo, apt-get and pip still work', { skip: !sim && 'a VM guest has its own kernel' }, async () => {
  await withSandbox(async (sbx) => {
    const refused = [
      'unshare -n true', 'unshare -m true', 'unshare -U true', 'unshare -p -f true', 'unshare -i true', 'unshare -u true', 'unshare -C true',
      'unshare -n ip link add hv0 type veth peer name hv1', 'unshare -n ip link add hb0 type bridge',
      'mount -t tmpfs none /mnt', 'mount --bind /home /mnt', 'ip link add hv2 type veth peer name hv3', 'ip route add 203.0.113.0/24 dev lo',
      "python3 -c 'import os; os.unshare(os.CLONE_NEWNET)'",
    ]
    for (const cmd of refused) {
      const r = await run(sbx, cmd, { asRoot: true })
      assert.notEqual(r.exitCode, 0, `guest root: ${cmd} succeeded`)
    }
    const sudo = await run(sbx, 'sudo -n true')
    assert.equal(sudo.exitCode, 0, sudo.stderr)
    assert.equal(sudo.stderr.trim(), '', `sudo printed: ${sudo.stderr}`)
    assert.equal((await run(sbx, 'apt-get --version')).exitCode, 0)
    assert.equal((await run(sbx, 'sudo -n apt-get -qq check')).exitCode, 0)
    const pip = await run(sbx, 'python3 -m pip --version || pip --version || python3 -c "import ensurepip"')
    assert.equal(pip.exitCode, 0, pip.stderr)
  })
})

test('attack: guest root opens no vsock socket (the host\'s and its hypervisor\'s vsock services)', { skip: !sim && 'a VM guest has its own kernel' }, async () => {
  await withSandbox(async (sbx) => {
    // vsock is no network namespace's: on a node that is itself a VM, CID 2
    // is its hypervisor. Refused with EPERM, as Docker refuses it.
    const r = await run(sbx, "python3 -c 'import socket; s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); s.connect((2, 1024))'", { asRoot: true })
    assert.notEqual(r.exitCode, 0, 'a vsock socket opened and connected')
    assert.match(r.stderr, /PermissionError|Operation not permitted/, `not refused by the filter: ${r.stderr}`)
  })
})

test('attack: one sandbox cannot take the host file table or process table', { skip: !sim && 'a VM guest has its own kernel' }, async () => {
  await withSandbox(async (sbx) => {
    const hard = Number((await run(sbx, 'ulimit -Hn', { asRoot: true })).stdout.trim())
    assert.ok(hard > 0 && hard <= 65536, `the guest's hard RLIMIT_NOFILE is ${hard}`)
    const raise = await run(sbx, 'ulimit -Hn 1048576', { asRoot: true })
    assert.notEqual(raise.exitCode, 0, 'guest root raised its hard file limit')
    // Ten processes each opening all they may: the sandbox's total stays bounded.
    const opener = "python3 -c 'import resource,os\\nresource.setrlimit(resource.RLIMIT_NOFILE,(resource.getrlimit(resource.RLIMIT_NOFILE)[1],)*2)\\nfs=[]\\ntry:\\n  while len(fs)<200000: fs.append(os.open(\"/dev/null\",os.O_RDONLY))\\nexcept OSError: pass\\nprint(len(fs))'"
    const r = await run(sbx, `printf '${opener.replace(/'/g, "'\\''")}' >/dev/null; python3 - <<'EOF'
import resource, os
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fs = []
try:
    while len(fs) < 200000:
        fs.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print(len(fs))
EOF`)
    const opened = Number(r.stdout.trim())
    assert.ok(opened > 0 && opened <= 65536, `one guest process opened ${opened} files`)
    // Processes: the sandbox's pid bound stops a fork storm.
    const storm = await run(sbx, 'n=0; for i in $(seq 1 6000); do sleep 300 & [ $? -eq 0 ] || break; n=$((n+1)); done 2>/dev/null; echo $(pgrep -c sleep)', { timeoutMs: 300_000 })
    const procs = Number(storm.stdout.trim().split('\n').pop())
    assert.ok(procs < 6000, `a sandbox started ${procs} processes`)
    await run(sbx, 'pkill sleep', { asRoot: true })
  })
})

// ---- 6. Amplification: requests with no valid credential cost no node fan-out ----

async function nodeURLs() {
  const r = kubectl(['get', 'nodeinventories', '-o', 'json'])
  assert.equal(r.code, 0, r.err)
  return JSON.parse(r.out).items.map((i) => i.address || i.spec?.address || i.status?.address).filter(Boolean).map((a) => (a.startsWith('http') ? a : `http://${a}`))
}

// nodeCalls sums the node API requests on the lookup routes (the ones a
// gateway's id or name resolution makes) over every node.
async function nodeCalls(urls) {
  let n = 0
  for (const u of urls) {
    const r = await raw('GET', '/metrics', {}, undefined, { url: u })
    for (const line of r.body.split('\n')) {
      const m = line.match(/^hearth_node_http_requests_total\{code="\d+",route="([^"]*)"\} (\d+)/)
      if (m && /\/v1\/sandboxes/.test(m[1])) n += Number(m[2])
    }
  }
  return n
}

test('attack: requests with fake credentials and unknown ids or names cost no node call', async () => {
  const urls = await nodeURLs()
  assert.ok(urls.length > 0, 'no node addresses')
  const before = await nodeCalls(urls)
  for (let i = 0; i < 20; i++) {
    const id = `sb${crypto.randomBytes(10).toString('hex')}`
    await raw('GET', '/files?path=%2Fetc%2Fpasswd', { 'E2b-Sandbox-Id': id, 'X-Access-Token': crypto.randomBytes(16).toString('hex') })
    await raw('GET', `/files?path=%2Fetc%2Fpasswd&signature=v1_${crypto.randomBytes(16).toString('hex')}&signature_expiration=9999999999`, { 'E2b-Sandbox-Id': id })
    await raw('GET', '/', { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8080' })
    await raw('POST', '/execute', { 'X-Sandbox-ID': `n${crypto.randomBytes(6).toString('hex')}`, 'Content-Type': 'application/json' }, '{"command":"id"}')
    await raw('POST', '/execute', { 'X-Sandbox-ID': `n${crypto.randomBytes(6).toString('hex')}`, 'X-Access-Token': 'fake', 'Content-Type': 'application/json' }, '{"command":"id"}')
  }
  const after = await nodeCalls(urls)
  assert.equal(after - before, 0, `100 requests without a valid credential cost ${after - before} node lookups`)
})

test('attack: the router tells nobody unauthenticated whether a name exists', async () => {
  const name = `hostile-exists-${crypto.randomBytes(3).toString('hex')}`
  const manifest = JSON.stringify({
    apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, namespace: 'default' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: template, resources: { requests: { cpu: '500m', memory: '512Mi' } } }] } } },
  })
  assert.equal(kubectl(['create', '-f', '-'], { input: manifest }).code, 0)
  try {
    for (const cred of [{}, { Authorization: 'Bearer not-a-token' }, { 'X-Access-Token': 'fake' }]) {
      const a = await raw('POST', '/execute', { 'X-Sandbox-ID': name, ...cred, 'Content-Type': 'application/json' }, '{"command":"id"}')
      const b = await raw('POST', '/execute', { 'X-Sandbox-ID': `${name}-nope`, ...cred, 'Content-Type': 'application/json' }, '{"command":"id"}')
      assert.equal(a.status, b.status, `${JSON.stringify(cred)}: existing ${a.status}, missing ${b.status}`)
      assert.ok(a.status === 401 || a.status === 403, `${JSON.stringify(cred)}: ${a.status}`)
      assert.equal(a.body.replaceAll(name, 'N'), b.body.replaceAll(`${name}-nope`, 'N'), 'the bodies differ')
    }
  } finally {
    kubectl(['delete', 'sandbox', name, '--wait=false'])
  }
})

// ---- 7. Connection exhaustion ----

// halfOpen holds n TCP connections to url that send part of a request's
// headers and then nothing, opened as fast as they go by workers child
// processes (a process's descriptor limit is its own), and resolves once
// all are open (or refused); close ends them.
async function halfOpen(url, n, workers = 4) {
  const u = new URL(url)
  const script = `
const net = require('node:net')
const [host, port, n] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])]
let open = 0, refused = 0, done = 0
const socks = []
for (let i = 0; i < n; i++) {
  const s = net.connect({ host, port })
  s.on('connect', () => { open++; s.write('GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n'); if (++done === n) report() })
  s.on('error', () => { refused++; if (++done === n) report() })
  socks.push(s)
}
function report() { process.stdout.write(JSON.stringify({ open, refused }) + '\\n') }
setInterval(() => {}, 1 << 30)
`
  const kids = Array.from({ length: workers }, (_, i) => spawn(process.execPath, ['-e', script, u.hostname, u.port, String(Math.floor(n / workers) + (i < n % workers ? 1 : 0))], { stdio: ['ignore', 'pipe', 'inherit'] }))
  const reports = await Promise.all(kids.map((k) => new Promise((resolve, reject) => {
    let out = ''
    k.stdout.on('data', (c) => { out += c; if (out.includes('\n')) resolve(JSON.parse(out)) })
    k.on('exit', (code) => reject(new Error(`a half-open worker exited ${code}`)))
  })))
  return {
    open: reports.reduce((a, r) => a + r.open, 0),
    refused: reports.reduce((a, r) => a + r.refused, 0),
    close: () => kids.forEach((k) => k.kill('SIGKILL')),
  }
}

async function timed(fn) {
  const t0 = Date.now()
  const r = await fn()
  return { r, ms: Date.now() - t0 }
}

// checkAnswered asserts that, right now, every node's and the gateway's
// health check, an authenticated e2b call on a connection opened before
// the attack (keepAlive), one on a new connection, and kubectl answer.
async function checkAnswered(what, nodes, keepAlive) {
  for (const [name, url, p] of [...nodes.map((u, i) => [`node-${i}`, u, '/healthz']), ['gateway', gw.href, '/health']]) {
    const h = await timed(() => raw('GET', p, {}, undefined, { url }))
    assert.ok(h.r.status >= 200 && h.r.status < 300, `${what}: ${name} health: ${h.r.status}`)
    assert.ok(h.ms < 5000, `${what}: ${name} health took ${h.ms} ms`)
    console.log(`# ${what}: ${name} health ${h.ms} ms`)
  }
  const list = (agent) => new Promise((resolve, reject) => {
    const req = http.request({ host: gw.hostname, port: gw.port, path: '/sandboxes', headers: { 'X-API-KEY': key }, agent }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)) })
    req.setTimeout(10_000, () => req.destroy(new Error('no answer in 10 s')))
    req.on('error', reject)
    req.end()
  })
  for (const [way, agent] of [['an open keep-alive connection', keepAlive], ['a new connection', false]]) {
    const l = await timed(() => list(agent))
    assert.equal(l.r, 200, `${what}: an authenticated e2b call on ${way}: ${l.r}`)
    assert.ok(l.ms < 5000, `${what}: an authenticated e2b call on ${way} took ${l.ms} ms`)
  }
  const k = await timed(async () => kubectl(['get', 'sandboxes', '--request-timeout=10s']))
  assert.equal(k.r.code, 0, `${what}: kubectl: ${k.r.err}`)
  console.log(`# ${what}: kubectl get sandboxes ${k.ms} ms`)
}

test('attack: 20,000 half-open connections from one source leave health checks and authenticated callers answered', { timeout: 600_000 }, async () => {
  const nodes = await nodeURLs()
  const n = Number(env.HEARTH_HALF_OPEN || 20000)
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 })
  try {
    await checkAnswered('before', nodes, keepAlive)
    // Spread over every listener of the process (the descriptors are the
    // process's, not the listener's), then all on one node.
    const targets = [...nodes, gw.href]
    for (const [what, spread] of [[`${n} across ${targets.length} listeners`, targets], [`${n} on one node`, [nodes[0]]]]) {
      const held = await Promise.all(spread.map((u) => halfOpen(u, Math.ceil(n / spread.length))))
      try {
        console.log(`# ${what}: ${held.reduce((a, h) => a + h.open, 0)} held open`)
        await checkAnswered(what, nodes, keepAlive)
      } finally {
        held.forEach((h) => h.close())
      }
    }
  } finally {
    keepAlive.destroy()
  }
})

// dialCaps are the gateway's connection caps for a process with this
// one's descriptor limit (70-hostile.sh starts sandbox-dev and this test
// under one limit): serve.DefaultLimits.
function dialCaps() {
  const m = fs.readFileSync('/proc/self/limits', 'utf8').match(/Max open files\s+\S+\s+(\S+)/)
  let total = 1 << 16
  if (m && m[1] !== 'unlimited') {
    const n = Number(m[1])
    total = Math.min(Math.max(n - Math.max(1024, Math.floor(n / 8)), 64), 1 << 20)
  }
  const outbound = Math.max(Math.floor(total / 2), 1)
  return {
    perSource: Math.min(Math.max(Math.floor(total / 4), 64), 4096),
    perDest: Math.min(Math.max(Math.floor(outbound / 4), 16), 4096, outbound),
  }
}

// openStream opens one anonymous request to port 8080 of sandbox id from
// source address from, and resolves once it streams ("open") or is
// answered otherwise: {status, retryAfter, close}.
function openStream(id, from) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: gw.hostname, port: gw.port, path: '/events', localAddress: from, agent: false, headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8080' } }, (res) => {
      const close = () => { req.destroy(); res.destroy() }
      if (res.statusCode !== 200) {
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode, retryAfter: res.headers['retry-after'], close }))
        return
      }
      res.once('data', () => resolve({ status: 200, close }))
    })
    req.setTimeout(60_000, () => req.destroy(new Error('no answer in 60 s')))
    req.on('error', reject)
    req.end()
  })
}

// The sandbox's app: every request gets a stream that stays open until
// its client goes (server-sent events), thousands at once.
const streamingApp = `
import asyncio, resource
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
async def serve(r, w):
    try:
        await r.readuntil(b"\\r\\n\\r\\n")
        w.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n\\r\\nopen\\n")
        await w.drain()
        await r.read()
    except Exception:
        pass
    finally:
        w.close()
async def main():
    s = await asyncio.start_server(serve, "0.0.0.0", 8080, backlog=8192)
    async with s:
        await s.serve_forever()
asyncio.run(main())
`

test('attack: long-lived streams to a public port take no more than the gateway\'s per-sandbox share of its connections; past it, 503 with Retry-After', { timeout: 600_000 }, async () => {
  const { perSource, perDest } = dialCaps()
  await withSandbox(async (sbx) => {
    await sbx.files.write('/tmp/app.py', streamingApp)
    await sbx.commands.run('python3 /tmp/app.py >/tmp/app.log 2>&1', { background: true })
    await pollUntil('the app to listen', async () => {
      const r = await openStream(sbx.sandboxId, '127.0.0.1').catch(() => ({ status: 0, close: () => {} }))
      r.close()
      return r.status === 200
    }, 60_000)
    // Spread over loopback source addresses, so that no source reaches
    // the per-source cap of accepted connections first.
    const sources = Array.from({ length: Math.ceil((perDest + 8) / Math.floor(perSource / 2)) + 1 }, (_, i) => `127.0.0.${i + 2}`)
    const open = []
    const refusals = []
    try {
      for (let i = 0; i < perDest + 8 && refusals.length === 0; i += 128) {
        const batch = await Promise.all(Array.from({ length: Math.min(128, perDest + 8 - i) }, (_, j) => openStream(sbx.sandboxId, sources[(i + j) % sources.length])))
        for (const r of batch) (r.status === 200 ? open : refusals).push(r)
      }
      console.log(`# ${open.length} streams open to one sandbox (cap ${perDest}), ${refusals.length} refused`)
      assert.ok(open.length <= perDest, `${open.length} streams open past the per-sandbox cap of ${perDest}`)
      assert.ok(open.length >= perDest - 16, `only ${open.length} of ${perDest} streams opened`)
      assert.ok(refusals.length > 0, 'no stream was refused')
      for (const r of refusals) {
        assert.equal(r.status, 503, `a stream past the cap: ${r.status}`)
        assert.ok(r.retryAfter, 'a refusal without Retry-After')
      }
      // Another sandbox is untouched by this one's share.
      await withSandbox(async (other) => {
        assert.equal((await run(other, 'echo ok')).stdout.trim(), 'ok')
      })
    } finally {
      for (const r of [...open, ...refusals]) r.close()
    }
    // Ended streams give their places back: the sandbox answers again.
    await pollUntil('the sandbox to answer its token again', async () => {
      try { return (await run(sbx, 'echo back')).stdout.trim() === 'back' } catch { return false }
    }, 60_000)
  })
})

// ---- 8. Statuses, host paths, hostname ----

test('attack: quota refusals are 429, bad paths 400, unknown templates 4xx naming the known ones, wrong methods 405', async () => {
  await withSandbox(async (sbx) => {
    const token = await tokenOfSandbox(sbx)
    const fork = await raw('POST', `/sandboxes/${sbx.sandboxId}/fork`, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, JSON.stringify({ count: 9 }))
    assert.ok(fork.status === 429 || fork.status === 400, `a fork past the tree's limit: ${fork.status} ${fork.body}`)
    const big = await raw('POST', `/sandboxes/${sbx.sandboxId}/fork`, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, JSON.stringify({ count: 50 }))
    assert.ok(big.status === 400 || big.status === 429, `a fork of 50: ${big.status} ${big.body}`)
    const nul = await raw('GET', '/files?path=%2Ftmp%2Fa%00b', { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token })
    assert.equal(nul.status, 400, `a NUL in a /files path: ${nul.status} ${nul.body}`)
  })
  const tpl = await raw('POST', '/sandboxes', { 'X-API-KEY': key, 'Content-Type': 'application/json' }, JSON.stringify({ templateID: 'no-such-template-anywhere' }))
  assert.ok(tpl.status === 400 || tpl.status === 404, `an unknown templateID: ${tpl.status} ${tpl.body}`)
  assert.match(tpl.body, /base|code-interpreter/, 'the answer names the known templates')
  for (const [m, p] of [['PUT', '/sandboxes'], ['PATCH', '/sandboxes/x'], ['GET', '/sandboxes/x/pause']]) {
    const r = await raw(m, p, { 'X-API-KEY': key })
    assert.equal(r.status, 405, `${m} ${p}: ${r.status}`)
  }
})

test('attack: the guest sees no host path in its mount table, and sudo resolves its own host name', async () => {
  await withSandbox(async (sbx) => {
    const mi = (await run(sbx, 'cat /proc/self/mountinfo /proc/1/mountinfo /proc/mounts 2>/dev/null', { asRoot: true })).stdout
    for (const hostPath of [dataDir, os.tmpdir() + '/', '/root/', '/var/lib/', '/work/', '.cache']) {
      assert.ok(!mi.includes(hostPath), `the guest's mount table shows the host path ${hostPath}:\n${mi.split('\n').filter((l) => l.includes(hostPath)).join('\n')}`)
    }
    const s = await run(sbx, 'sudo -n true')
    assert.doesNotMatch(s.stderr, /unable to resolve host/)
  })
})

// ---- 9. e2b key scope ----

test('attack: an e2b key sees and kills only its own namespace, and no kubectl-created sandbox it was not given', async () => {
  const other = env.HEARTH_E2B_KEY_OTHER
  assert.ok(other, 'HEARTH_E2B_KEY_OTHER is not set')
  await withSandbox(async (sbx) => {
    for (const [m, p] of [['GET', `/sandboxes/${sbx.sandboxId}`], ['DELETE', `/sandboxes/${sbx.sandboxId}`], ['POST', `/sandboxes/${sbx.sandboxId}/pause`], ['POST', `/sandboxes/${sbx.sandboxId}/connect`]]) {
      const r = await raw(m, p, { 'X-API-KEY': other, 'Content-Type': 'application/json' }, m === 'POST' ? '{"timeout":60}' : undefined)
      assert.equal(r.status, 404, `another namespace's key: ${m} ${p}: ${r.status}`)
    }
    const list = await raw('GET', '/v2/sandboxes', { 'X-API-KEY': other })
    assert.ok(!list.body.includes(sbx.sandboxId), "another namespace's key lists the sandbox")
    assert.equal((await run(sbx, 'echo alive')).stdout.trim(), 'alive')
  })
  const name = `hostile-kubectl-${crypto.randomBytes(3).toString('hex')}`
  const manifest = JSON.stringify({
    apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, namespace: 'default' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: template, resources: { requests: { cpu: '500m', memory: '512Mi' } } }] } } },
  })
  const c = kubectl(['create', '-o', 'json', '-f', '-'], { input: manifest })
  assert.equal(c.code, 0, c.err)
  try {
    const id = JSON.parse(c.out).metadata.annotations['sandbox.cocoonstack.io/claim-id']
    const list = await raw('GET', '/v2/sandboxes', { 'X-API-KEY': key })
    assert.equal(list.status, 200)
    assert.ok(!list.body.includes(name) && !list.body.includes(id.replace(/[^a-z0-9]/g, '')), 'e2b lists a kubectl-created sandbox not labelled for it')
    const kill = await raw('DELETE', `/sandboxes/${id}`, { 'X-API-KEY': key })
    assert.equal(kill.status, 404, `e2b killed a kubectl-created sandbox: ${kill.status}`)
    assert.equal(kubectl(['get', 'sandbox', name]).code, 0, 'the kubectl-created sandbox is gone')
  } finally {
    kubectl(['delete', 'sandbox', name, '--wait=false'])
  }
})

// kubectlSandbox creates a Sandbox named name (with labels) through
// kubectl and returns its claim id, rendered e2b id and token.
function kubectlSandbox(name, labels = undefined) {
  const manifest = JSON.stringify({
    apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, namespace: 'default', ...(labels ? { labels } : {}) },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: template, resources: { requests: { cpu: '500m', memory: '512Mi' } } }] } } },
  })
  const c = kubectl(['create', '-o', 'json', '-f', '-'], { input: manifest })
  assert.equal(c.code, 0, c.err)
  const ann = JSON.parse(c.out).metadata.annotations
  const id = ann['sandbox.cocoonstack.io/claim-id']
  assert.ok(id && ann['sandbox.cocoonstack.io/token'], 'the create answer names the claim id and token')
  return { id, e2bId: id.replace(/[^a-z0-9]/g, ''), token: ann['sandbox.cocoonstack.io/token'] }
}

// nodeRoot calls every node's API as root (sandbox-dev's root-token) and
// returns their answers.
async function nodeRoot(method, p) {
  const root = fs.readFileSync(path.join(dataDir, 'root-token'), 'utf8').trim()
  const out = []
  for (const u of await nodeURLs()) out.push(await raw(method, p, { Authorization: `Bearer ${root}` }, undefined, { url: u }))
  return out
}

test('attack: labelling a kubectl-created sandbox for e2b after its create hands neither it nor its token to an e2b key', async () => {
  const name = `hostile-relabel-${crypto.randomBytes(3).toString('hex')}`
  const labelled = `${name}-at-create`
  const victim = kubectlSandbox(name)
  try {
    // Someone allowed only `patch sandboxes` (kubectl label) and an e2b
    // key for the namespace tries to read the sandbox's token without
    // `sandboxes/exec`.
    const l = kubectl(['label', 'sandbox', name, 'sandbox.cocoonstack.io/e2b=true'])
    assert.equal(l.code, 0, l.err)
    const got = kubectl(['get', 'sandbox', name, '-o', 'jsonpath={.metadata.labels}'])
    assert.match(got.out, /sandbox\.cocoonstack\.io\/e2b/, 'the label is recorded')
    // The fleet's view (what e2b lists from) has the label too.
    await pollUntil('the label to reach the fleet view', async () => {
      const g = kubectl(['get', 'sandboxes', '-l', 'sandbox.cocoonstack.io/e2b=true', '-o', 'name'])
      return g.out.includes(name)
    })
    for (const [m, p, body] of [['GET', `/sandboxes/${victim.e2bId}`], ['GET', `/sandboxes/${victim.id}`], ['POST', `/v2/sandboxes/${victim.e2bId}/connect`, '{"timeout":60}'],
      ['POST', `/sandboxes/${victim.e2bId}/fork`, '{}'], ['POST', `/sandboxes/${victim.e2bId}/snapshots`, '{}'], ['DELETE', `/sandboxes/${victim.e2bId}`]]) {
      const r = await raw(m, p, { 'X-API-KEY': key, 'Content-Type': 'application/json' }, body)
      assert.equal(r.status, 404, `${m} ${p} of a sandbox labelled after its create: ${r.status} ${r.body.slice(0, 200)}`)
      assert.ok(!r.body.includes(victim.token), `${m} ${p}: leaked the token`)
    }
    const list = await raw('GET', '/v2/sandboxes', { 'X-API-KEY': key })
    assert.ok(!list.body.includes(victim.e2bId), 'e2b lists a sandbox labelled after its create')
    assert.equal(kubectl(['get', 'sandbox', name]).code, 0, 'the sandbox is gone')

    // Created with the label, a sandbox is e2b's (its creator holds the
    // token anyway); removing the label later does not hide it.
    const mine = kubectlSandbox(labelled, { 'sandbox.cocoonstack.io/e2b': 'true' })
    const r = await raw('GET', `/sandboxes/${mine.e2bId}`, { 'X-API-KEY': key })
    assert.equal(r.status, 200, r.body)
    assert.equal(JSON.parse(r.body).envdAccessToken, mine.token)
    assert.equal(kubectl(['label', 'sandbox', labelled, 'sandbox.cocoonstack.io/e2b-']).code, 0)
    assert.equal((await raw('GET', `/sandboxes/${mine.e2bId}`, { 'X-API-KEY': key })).status, 200, 'unlabelling hid an e2b sandbox')
  } finally {
    kubectl(['delete', 'sandbox', name, labelled, '--wait=false', '--ignore-not-found'])
  }
})

test('attack: an e2b key cannot list, clone or delete a snapshot Kubernetes took of a sandbox the key does not see', async () => {
  const name = `hostile-ksnap-${crypto.randomBytes(3).toString('hex')}`
  const snapName = `${name}-golden`
  const victim = kubectlSandbox(name)
  let snapID = ''
  try {
    const s = kubectl(['create', '--raw', `/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/${name}/snapshot`, '-f', '-'],
      { input: JSON.stringify({ apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'SandboxSnapshotOptions', name: snapName }) })
    assert.equal(s.code, 0, s.err)
    snapID = JSON.parse(s.out).snapshotID
    assert.match(snapID, /^sn_/)
    const list = await raw('GET', '/snapshots', { 'X-API-KEY': key })
    assert.equal(list.status, 200, list.body)
    assert.ok(!list.body.includes(snapID) && !list.body.includes(snapName), `the key lists the snapshot: ${list.body.slice(0, 300)}`)
    for (const templateID of [snapID, snapID.replace('_', '-'), snapName]) {
      const r = await raw('POST', '/v2/sandboxes', { 'X-API-KEY': key, 'Content-Type': 'application/json' }, JSON.stringify({ templateID, timeout: 60 }))
      if (r.status < 300) await Sandbox.kill(JSON.parse(r.body).sandboxID).catch(() => {})
      assert.equal(r.status, 404, `a clone of the snapshot by ${templateID}: ${r.status} ${r.body.slice(0, 200)}`)
    }
    const del = await raw('DELETE', `/templates/${snapID}`, { 'X-API-KEY': key })
    assert.equal(del.status, 404, `deleting the snapshot: ${del.status} ${del.body}`)
    const still = await nodeRoot('GET', '/v1/snapshots')
    assert.ok(still.some((r) => r.body.includes(snapID)), 'the snapshot is gone')
  } finally {
    kubectl(['delete', 'sandbox', name, '--wait=false', '--ignore-not-found'])
    if (snapID) await nodeRoot('DELETE', `/v1/snapshots/${snapID}`)
  }
})
