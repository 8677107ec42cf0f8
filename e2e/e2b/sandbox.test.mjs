// Acceptance test of a real, confined sandbox: the unmodified e2b SDK
// against a running sandbox-dev (hack/test.d/52-real-sandbox.sh starts one
// with the default backend and the built-in Debian image).
//
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the SDK's own),
// HEARTH_TEMPLATE (the pool's image), HEARTH_DATA_DIR (sandbox-dev's data
// dir: credentials a guest must not reach), HEARTH_HOST_PORTS (comma-separated
// loopback ports of host services: API server, etcd, nodes, gateway),
// HEARTH_VMM (its backend; default sim).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { execFileSync } from 'node:child_process'
import { Sandbox } from 'e2b'

const template = process.env.HEARTH_TEMPLATE
const dataDir = process.env.HEARTH_DATA_DIR
const hostPorts = (process.env.HEARTH_HOST_PORTS || '').split(',').filter(Boolean).map(Number)
// HEARTH_VMM names sandbox-dev's backend; sim guests are host processes.
const guestOnHost = (process.env.HEARTH_VMM || 'sim') === 'sim'

async function withSandbox(fn) {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000 })
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

async function run(sbx, cmd, opts = {}) {
  try {
    return await sbx.commands.run(cmd, { timeoutMs: 60_000, ...opts })
  } catch (e) {
    // CommandExitError carries the result; callers assert on exitCode.
    if (e && typeof e.exitCode === 'number') return e
    throw e
  }
}

// hostProcesses lists the host's process table (pid and args).
function hostProcesses() {
  return execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' })
}

async function pollUntil(what, cond, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

test('the guest is the image: python3, os-release, user, home, sudo; it knows its sandbox id', async () => {
  await withSandbox(async (sbx) => {
    assert.equal((await run(sbx, "python3 -c 'print(6*7)'")).stdout.trim(), '42')
    assert.match((await run(sbx, 'cat /etc/os-release')).stdout, /bookworm/)
    assert.equal((await run(sbx, 'id -un')).stdout.trim(), 'user')
    assert.equal((await run(sbx, 'pwd')).stdout.trim(), '/home/user')
    assert.equal((await run(sbx, 'sudo -n id -u')).stdout.trim(), '0')
    assert.match((await run(sbx, 'git --version')).stdout, /^git version/)
    assert.equal((await run(sbx, "python -c 'print(1)'")).stdout.trim(), '1')
    assert.equal((await run(sbx, 'echo "$E2B_SANDBOX $E2B_SANDBOX_ID"')).stdout.trim(), `true ${sbx.sandboxId}`)
    assert.equal((await run(sbx, 'cat /run/e2b/.E2B_SANDBOX /run/e2b/.E2B_SANDBOX_ID')).stdout.trim(), `true${sbx.sandboxId}`)
  })
})

test('nothing of the host is reachable from inside', async () => {
  await withSandbox(async (sbx) => {
    // The node's data dir (root token, claim table, e2b key) by any path.
    for (const p of [dataDir, `${dataDir}/root-token`, `${dataDir}/e2b-api-key`]) {
      const r = await run(sbx, `sudo -n ls -d '${p}' 2>&1`)
      assert.notEqual(r.exitCode, 0, `${p} is visible in the guest`)
    }
    const ls = (await run(sbx, 'ls /')).stdout.split(/\s+/)
    assert.ok(ls.includes('home') && !ls.includes('work'), `ls / shows ${ls}`)
    // TCP to the host's loopback services and the metadata address fails.
    const targets = hostPorts.flatMap((p) => [`127.0.0.1:${p}`, `10.0.2.2:${p}`]).concat(['169.254.169.254:80'])
    const probe = `
import socket, sys
open_ = []
for t in sys.argv[1:]:
    h, p = t.rsplit(':', 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((h, int(p)))
        open_.append(t)
    except OSError:
        pass
    finally:
        s.close()
print(','.join(open_))
`
    await sbx.files.write('/tmp/probe.py', probe)
    const r = await run(sbx, `python3 /tmp/probe.py ${targets.join(' ')}`)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.stdout.trim(), '', `connected from the guest to ${r.stdout.trim()}`)
  })
})

test('no agent token on the host process table', async () => {
  await withSandbox(async (sbx) => {
    const info = await Sandbox.connect(sbx.sandboxId)
    const token = info.envdAccessToken || sbx.envdAccessToken
    if (token) assert.ok(!hostProcesses().includes(token), 'a sandbox token is in ps -eo args')
  })
})

test('a background process dies with its sandbox', async () => {
  const marker = `sleep ${800 + Math.floor(Math.random() * 99)}`
  await withSandbox(async (sbx) => {
    await sbx.commands.run(marker, { background: true })
    await pollUntil('the background process to start', async () => (await run(sbx, `pgrep -f '${marker}'`)).exitCode === 0)
    // The sim backend's guests are host processes (in their own namespaces):
    // there the host sees it until the sandbox is gone. A VM's are not.
    if (guestOnHost) await pollUntil('the guest process on the host', () => hostProcesses().includes(marker))
  })
  await pollUntil('the background process to be gone after kill', () => !hostProcesses().includes(marker))
})

test('two sandboxes writing the same absolute path see only their own file', async () => {
  await withSandbox(async (a) => {
    await withSandbox(async (b) => {
      await a.files.write('/tmp/same-path', 'from a')
      await b.files.write('/tmp/same-path', 'from b')
      assert.equal(await a.files.read('/tmp/same-path'), 'from a')
      assert.equal(await b.files.read('/tmp/same-path'), 'from b')
    })
  })
})

test('envs set at create survive a pause without memory (the guest restarts from its disk)', async () => {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000, envs: { HEARTH_ENV_KEPT: 'kept-across-resume' } })
  try {
    assert.equal((await run(sbx, 'echo "$HEARTH_ENV_KEPT"')).stdout.trim(), 'kept-across-resume')
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
    assert.equal((await run(again, 'echo "$HEARTH_ENV_KEPT"')).stdout.trim(), 'kept-across-resume')
  } finally {
    await sbx.kill().catch(() => {})
  }
})

// The sandbox log (docs/API.md#sandbox-logs) of a real sandbox, read
// through e2b's logs endpoint (the SDK has no call for it): a command's
// start, output lines and exit are there; the create's envs and the
// command's envs are not.
test('the sandbox log records commands and their output, never their envs', async () => {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000, envs: { HEARTH_LOG_CREATE: 'create-secret-value' } })
  try {
    const r = await run(sbx, 'echo logged-out; echo logged-err >&2', { envs: { HEARTH_LOG_RUN: 'run-secret-value' } })
    assert.equal(r.exitCode, 0)
    const resp = await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}/logs`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
    const body = await resp.text()
    assert.equal(resp.status, 200, body)
    const lines = JSON.parse(body).logs.map((l) => l.line)
    assert.ok(lines.some((l) => l.startsWith('[start pid ') && l.includes('echo logged-out')), body)
    assert.ok(lines.includes('logged-out') && lines.includes('logged-err'), body)
    assert.ok(lines.some((l) => l.startsWith('[exit pid ') && l.endsWith('exit status 0')), body)
    assert.ok(!body.includes('secret-value') && !body.includes('HEARTH_LOG_'), body)
  } finally {
    await sbx.kill().catch(() => {})
  }
})

// e2b's host addressing: with the gateway's domain set (HEARTH_E2B_DOMAIN,
// sandbox-dev --e2b-domain) and the name pointed at the gateway (here: the
// Host header on E2B_API_URL), <port>-<id>.<domain> reaches a web server in
// the sandbox with no credentials, as on e2b; a sandbox created with
// network.allowPublicTraffic false answers only its traffic access token.
const domain = process.env.HEARTH_E2B_DOMAIN
test('a web server in the sandbox answers on its host-routed URL; private traffic needs the traffic token', { skip: !domain && 'HEARTH_E2B_DOMAIN is not set' }, async () => {
  const gw = new URL(process.env.E2B_API_URL)
  const get = (host, headers = {}) => new Promise((resolve, reject) => {
    const req = http.request({ host: gw.hostname, port: gw.port, path: '/index.html', headers: { host, ...headers } }, (res) => {
      let data = ''
      res.on('data', (c) => { data += c })
      res.on('end', () => resolve({ status: res.statusCode, body: data }))
    })
    req.on('error', reject)
    req.end()
  })
  for (const network of [undefined, { allowPublicTraffic: false }]) {
    const sbx = await Sandbox.create(template, { timeoutMs: 120_000, network })
    try {
      await sbx.files.write('/home/user/www/index.html', 'served from the sandbox')
      await sbx.commands.run('cd /home/user/www && exec python3 -m http.server 8000', { background: true })
      const host = sbx.getHost(8000)
      assert.equal(host, `8000-${sbx.sandboxId}.${domain}`)
      const headers = network ? { 'e2b-traffic-access-token': sbx.trafficAccessToken } : {}
      let r
      await pollUntil('the web server to answer', async () => (r = await get(host, headers)).status === 200)
      assert.equal(r.body, 'served from the sandbox')
      if (network) assert.equal((await get(host)).status, 401, 'a private sandbox answered without its traffic token')
    } finally {
      await sbx.kill().catch(() => {})
    }
  }
})
