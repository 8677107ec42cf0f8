// Acceptance test: the unmodified e2b JS SDK (e2b@2.51.0) against Hearth's
// e2b gateway. The harness (e2b/sdk_test.go, or hack/test.d/50-e2b-sdk.sh)
// starts the gateway and points the SDK at it with E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY; HEARTH_E2B_TEMPLATE names a template
// with warm capacity.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox, CommandExitError, AuthenticationError, ALL_TRAFFIC } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} must be set (run through the Go harness)`)
}
const template = process.env.HEARTH_E2B_TEMPLATE || 'ghcr.io/cocoonstack/sandbox/rt:24.04'

test('the e2b SDK drives a Hearth sandbox through its whole life', async (t) => {
  const sandbox = await Sandbox.create(template, { metadata: { suite: 'sdk' }, envs: { HEARTH_GREETING: 'hi' } })
  let killed = false
  t.after(async () => { if (!killed) await sandbox.kill().catch(() => {}) })

  assert.match(sandbox.sandboxId, /^[a-z0-9-]+$/, 'sandbox ids are DNS-label safe')

  await t.test('commands.run reports a non-zero exit as CommandExitError', async () => {
    await assert.rejects(sandbox.commands.run('echo hello && exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stdout, 'hello\n')
      return true
    })
  })

  await t.test('commands.run sees create-time envs, envs and cwd', async () => {
    const r = await sandbox.commands.run('echo "$HEARTH_GREETING $EXTRA" && pwd', { envs: { EXTRA: 'there' } })
    assert.equal(r.exitCode, 0)
    const [line, cwd] = r.stdout.trimEnd().split('\n')
    assert.equal(line, 'hi there')
    assert.ok(cwd.length > 0)
  })

  await t.test('files.write / files.read round trip', async () => {
    const info = await sandbox.files.write('hearth-sdk/a.txt', 'hello file')
    assert.equal(info.name, 'a.txt')
    assert.equal(await sandbox.files.read('hearth-sdk/a.txt'), 'hello file')
    assert.equal(await sandbox.files.exists('hearth-sdk/a.txt'), true)
    assert.equal(await sandbox.files.exists('hearth-sdk/missing.txt'), false)
    const r = await sandbox.commands.run('cat hearth-sdk/a.txt')
    assert.equal(r.stdout, 'hello file')
  })

  await t.test('Sandbox.list contains it, with its metadata', async () => {
    const items = await Sandbox.list({ query: { metadata: { suite: 'sdk' } } }).nextItems()
    const mine = items.find((s) => s.sandboxId === sandbox.sandboxId)
    assert.ok(mine, `list ${JSON.stringify(items.map((s) => s.sandboxId))} misses ${sandbox.sandboxId}`)
    assert.equal(mine.metadata.suite, 'sdk')
  })

  await t.test('getInfo and setTimeout', async () => {
    const info = await sandbox.getInfo()
    assert.equal(info.sandboxId, sandbox.sandboxId)
    assert.equal(info.templateId, template)
    assert.equal(info.state, 'running')
    await sandbox.setTimeout(600_000)
    const after = await sandbox.getInfo()
    assert.ok(after.endAt.getTime() >= info.endAt.getTime(), 'setTimeout moved the lease end')
  })

  await t.test('files.remove of a missing path succeeds; a symlink reports its resolved target', async () => {
    await sandbox.files.remove('hearth-sdk/never-was.txt')
    await sandbox.commands.run('ln -sf a.txt hearth-sdk/link && ln -sf link hearth-sdk/link2')
    const info = await sandbox.files.getInfo('hearth-sdk/link2')
    assert.equal(info.type, 'symlink')
    assert.ok(info.symlinkTarget?.startsWith('/'), `symlinkTarget ${info.symlinkTarget} is absolute`)
    assert.ok(info.symlinkTarget.endsWith('/hearth-sdk/a.txt'), `symlinkTarget ${info.symlinkTarget} is resolved`)
  })

  await t.test('files.getInfo carries size, mode, permissions, owner, group and mtime', async () => {
    const i = await sandbox.files.getInfo('hearth-sdk/a.txt')
    assert.equal(i.type, 'file')
    assert.equal(i.size, 'hello file'.length)
    assert.equal(i.mode, 0o644)
    assert.equal(i.permissions, '-rw-r--r--')
    assert.ok(i.owner && i.group, `owner ${i.owner} group ${i.group}`)
    assert.ok(i.modifiedTime instanceof Date && Math.abs(i.modifiedTime.getTime() - Date.now()) < 600_000)
    const listed = (await sandbox.files.list('hearth-sdk')).find((e) => e.name === 'a.txt')
    assert.equal(listed.owner, i.owner)
  })

  await t.test('files.write metadata is kept as the file\'s metadata', async () => {
    const w = await sandbox.files.write('hearth-sdk/md.txt', 'm', { metadata: { origin: 'sdk-test' } })
    assert.deepEqual(w.metadata, { origin: 'sdk-test' })
    assert.deepEqual((await sandbox.files.getInfo('hearth-sdk/md.txt')).metadata, { origin: 'sdk-test' })
    assert.equal((await sandbox.files.getInfo('hearth-sdk/a.txt')).metadata, undefined)
  })

  await t.test('pty: create, sendInput, resize, kill', async () => {
    let out = ''
    const dec = new TextDecoder()
    const enc = (s) => new TextEncoder().encode(s)
    const h = await sandbox.pty.create({ cols: 100, rows: 30, onData: (d) => { out += dec.decode(d) } })
    const waitFor = async (s) => {
      for (let i = 0; i < 200 && !out.includes(s); i++) await new Promise((r) => setTimeout(r, 50))
      assert.ok(out.includes(s), `pty output ${JSON.stringify(out)} misses ${JSON.stringify(s)}`)
    }
    await sandbox.pty.sendInput(h.pid, enc('stty size; test -t 0 && echo TTY-$((40+2))\n'))
    await waitFor('TTY-42')
    assert.match(out, /30 100/)
    await sandbox.pty.resize(h.pid, { cols: 120, rows: 40 })
    await sandbox.pty.sendInput(h.pid, enc('stty size\n'))
    await waitFor('40 120')
    assert.equal(await sandbox.pty.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    assert.equal(await sandbox.pty.kill(h.pid), false, 'a second kill finds no process')
  })

  await t.test('files.watchDir reports create, write and remove, recursively', async () => {
    await sandbox.files.makeDir('hearth-sdk/watched/sub')
    const events = []
    const w = await sandbox.files.watchDir('hearth-sdk/watched', (e) => { events.push(e) }, { recursive: true, includeEntry: true, allowNetworkMounts: true })
    try {
      await sandbox.files.write('hearth-sdk/watched/sub/n.txt', 'x')
      await sandbox.files.remove('hearth-sdk/watched/sub/n.txt')
      const has = (type) => events.some((e) => e.name === 'sub/n.txt' && e.type === type)
      for (let i = 0; i < 100 && !(has('create') && has('write') && has('remove')); i++) await new Promise((r) => setTimeout(r, 50))
      for (const type of ['create', 'write', 'remove']) assert.ok(has(type), `no ${type} in ${JSON.stringify(events)}`)
      const created = events.find((e) => e.name === 'sub/n.txt' && e.type === 'create')
      assert.equal(created.entry?.name, 'n.txt', 'includeEntry describes the created file')
    } finally {
      await w.stop()
    }
  })

  await t.test('signed downloadUrl / uploadUrl work with no other credentials; unsigned and expired ones are refused', async () => {
    // The SDK builds the URL on E2B_SANDBOX_URL; e2b's host addressing
    // (<port>-<id>.<domain>) names the sandbox, as a browser would reach it.
    const host = `49983-${sandbox.sandboxId}.${process.env.HEARTH_E2B_DOMAIN}`
    const call = (u, method = 'GET', body) => new Promise((resolve, reject) => {
      const url = new URL(u)
      const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers: { host } }, (res) => {
        let data = ''
        res.on('data', (c) => { data += c })
        res.on('end', () => resolve({ status: res.statusCode, body: data }))
      })
      req.on('error', reject)
      if (body !== undefined) { req.setHeader('content-type', 'application/octet-stream'); req.end(body) } else req.end()
    })
    const down = await sandbox.downloadUrl('hearth-sdk/a.txt')
    assert.match(down, /signature=v1_/)
    assert.deepEqual(await call(down), { status: 200, body: 'hello file' })
    const up = await sandbox.uploadUrl('hearth-sdk/uploaded.txt', { useSignatureExpiration: 60 })
    assert.match(up, /signature_expiration=/)
    assert.equal((await call(up, 'POST', 'via url')).status, 200)
    assert.equal(await sandbox.files.read('hearth-sdk/uploaded.txt'), 'via url')

    const unsigned = new URL(down)
    unsigned.searchParams.delete('signature')
    assert.ok([401, 403].includes((await call(unsigned.toString())).status), 'an unsigned URL is refused')
    const tampered = new URL(down)
    tampered.searchParams.set('path', 'hearth-sdk/uploaded.txt')
    assert.ok([401, 403].includes((await call(tampered.toString())).status), 'a signature is for its own path')
    const expired = await sandbox.downloadUrl('hearth-sdk/a.txt', { useSignatureExpiration: -10 })
    assert.equal((await call(expired)).status, 401, 'an expired URL is refused')
  })

  await t.test('getMetrics honours start and end', async () => {
    assert.ok((await sandbox.getMetrics()).length >= 1)
    const future = new Date(Date.now() + 3_600_000)
    assert.deepEqual(await sandbox.getMetrics({ start: future, end: new Date(future.getTime() + 60_000) }), [])
  })

  await t.test('Sandbox.create(<snapshot id>) starts a clone of the snapshot', async () => {
    const snap = await sandbox.createSnapshot()
    const clone = await Sandbox.create(snap.snapshotId)
    try {
      assert.notEqual(clone.sandboxId, sandbox.sandboxId)
      assert.equal(await clone.files.read('hearth-sdk/a.txt'), 'hello file')
      const r = await clone.commands.run('echo clone')
      assert.equal(r.stdout, 'clone\n')
    } finally {
      await clone.kill()
      await Sandbox.deleteSnapshot(snap.snapshotId)
    }
  })

  await t.test('pause twice: the second is false', async () => {
    assert.equal(await sandbox.pause(), true)
    assert.equal(await sandbox.pause(), false)
    assert.equal((await sandbox.getInfo()).state, 'paused')
  })

  await t.test('connect resumes it', async () => {
    const again = await Sandbox.connect(sandbox.sandboxId)
    assert.equal(again.sandboxId, sandbox.sandboxId)
    assert.equal((await again.getInfo()).state, 'running')
    const r = await again.commands.run('echo resumed')
    assert.equal(r.stdout, 'resumed\n')
  })

  await t.test('kill twice: the second is false', async () => {
    assert.equal(await sandbox.kill(), true)
    killed = true
    assert.equal(await sandbox.kill(), false)
    assert.equal(await sandbox.isRunning(), false)
  })
})

test('lifecycle onTimeout pause: paused, not killed, at its timeout; connect resumes it intact', async (t) => {
  const sandbox = await Sandbox.create(template, { timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
  t.after(async () => { await sandbox.kill().catch(() => {}) })
  await sandbox.files.write('hearth-sdk/kept.txt', 'kept')
  const bg = await sandbox.commands.run('sleep 600', { background: true })
  const boot = await bootId(sandbox)
  assert.equal((await sandbox.getInfo()).lifecycle.onTimeout, 'pause')

  let state
  for (let i = 0; i < 100 && state !== 'paused'; i++) {
    await new Promise((r) => setTimeout(r, 100))
    state = (await Sandbox.getInfo(sandbox.sandboxId)).state
  }
  assert.equal(state, 'paused', 'the timeout paused the sandbox')
  await new Promise((r) => setTimeout(r, 1_500))
  assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, 'paused', 'and it stays paused past its deadline')

  const again = await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal(await again.files.read('hearth-sdk/kept.txt'), 'kept')
  assert.equal(await bootId(again), boot, 'a pause with memory is the same boot')
  const procs = await again.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid), `process ${bg.pid} survived the pause: ${JSON.stringify(procs.map((p) => p.pid))}`)
})

test('lifecycle autoResume: a data-plane request resumes the auto-paused sandbox', async (t) => {
  const sandbox = await Sandbox.create(template, { timeoutMs: 1_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  t.after(async () => { await sandbox.kill().catch(() => {}) })
  let state
  for (let i = 0; i < 100 && state !== 'paused'; i++) {
    await new Promise((r) => setTimeout(r, 100))
    state = (await Sandbox.getInfo(sandbox.sandboxId)).state
  }
  assert.equal(state, 'paused')
  const r = await sandbox.commands.run('echo woke')
  assert.equal(r.stdout, 'woke\n')
  assert.equal((await sandbox.getInfo()).state, 'running')
})

// bootId is the guest kernel's boot id: a new one at every boot.
async function bootId (sandbox) {
  const r = await sandbox.commands.run('cat /proc/sys/kernel/random/boot_id')
  const id = r.stdout.trim()
  assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
  return id
}

// e2b's own test of the same name: pause({keepMemory: false}) keeps the
// file system only; connect boots the sandbox again from it.
test('filesystem-only pause reboots on resume but keeps the filesystem', async (t) => {
  const sandbox = await Sandbox.create(template)
  t.after(async () => { await sandbox.kill().catch(() => {}) })
  await sandbox.files.write('hearth-sdk/disk.txt', 'on disk')
  const bg = await sandbox.commands.run('sleep 600', { background: true })
  const before = await bootId(sandbox)
  assert.equal(await sandbox.pause({ keepMemory: false }), true)
  assert.equal((await sandbox.getInfo()).state, 'paused')
  assert.equal(await sandbox.pause({ keepMemory: false }), false)

  const again = await Sandbox.connect(sandbox.sandboxId)
  assert.equal((await again.getInfo()).state, 'running')
  assert.notEqual(await bootId(again), before, 'a filesystem-only pause reboots the sandbox')
  assert.equal(await again.files.read('hearth-sdk/disk.txt'), 'on disk')
  assert.equal((await again.commands.run('echo back')).stdout, 'back\n')
  const procs = await again.commands.list()
  assert.ok(!procs.some((p) => p.pid === bg.pid), 'processes do not survive a pause without memory')
})

// e2b's own test of the same name: the timeout's pause without memory
// (onTimeout {action: 'pause', keepMemory: false}) keeps the file system
// only; connect boots the sandbox again from it.
test('filesystem-only auto-pause reboots on connect', async (t) => {
  const sandbox = await Sandbox.create(template, { timeoutMs: 2_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  t.after(async () => { await sandbox.kill().catch(() => {}) })
  await sandbox.files.write('hearth-sdk/auto.txt', 'kept')
  const bg = await sandbox.commands.run('sleep 600', { background: true })
  const before = await bootId(sandbox)
  let state
  for (let i = 0; i < 100 && state !== 'paused'; i++) {
    await new Promise((r) => setTimeout(r, 100))
    state = (await Sandbox.getInfo(sandbox.sandboxId)).state
  }
  assert.equal(state, 'paused', 'the timeout paused the sandbox')

  const again = await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await again.getInfo()).state, 'running')
  assert.notEqual(await bootId(again), before, 'a filesystem-only auto-pause reboots the sandbox')
  assert.equal(await again.files.read('hearth-sdk/auto.txt'), 'kept')
  const procs = await again.commands.list()
  assert.ok(!procs.some((p) => p.pid === bg.pid), 'processes do not survive a pause without memory')
})

// Egress policy (docs/API.md#egress-policy) against the harness's test
// network (internal/testnet: allowed.test and denied.test exist only in
// namespaces the test made); it needs root, so the harness sets
// HEARTH_E2B_TESTNET only then.
const testnet = { skip: !process.env.HEARTH_E2B_TESTNET && 'needs the test network (root)' }

// reaches reports whether an HTTP request from inside the sandbox to host
// answers (every test-network host answers "hello from <addr>").
async function reaches (sandbox, host) {
  const r = await sandbox.commands.run(`printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${host} 80 2>&1; true`)
  return r.stdout.includes('hello from')
}

test('network denyOut ALL_TRAFFIC with an allowOut domain: only the allowed name is reachable', testnet, async (t) => {
  const sandbox = await Sandbox.create(template, { network: { denyOut: [ALL_TRAFFIC], allowOut: ['allowed.test'] } })
  t.after(async () => { await sandbox.kill().catch(() => {}) })
  assert.equal(await reaches(sandbox, 'allowed.test'), true, 'allowed.test is reachable')
  assert.equal(await reaches(sandbox, 'denied.test'), false, 'denied.test is not')
  assert.equal(await reaches(sandbox, '198.18.0.20'), false, "denied.test's address is not")
  const info = await sandbox.getInfo()
  assert.equal(info.allowInternetAccess, true)
  assert.deepEqual(info.network.allowOut, ['allowed.test'])
  assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC])
  await assert.rejects(sandbox.updateNetwork({ allowInternetAccess: true }), /fixed at claim time/)
  assert.equal(await reaches(sandbox, 'denied.test'), false, 'a refused update changed nothing')
})

test('allowInternetAccess false reaches nothing; with an allowOut address only that', testnet, async (t) => {
  const none = await Sandbox.create(template, { allowInternetAccess: false })
  t.after(async () => { await none.kill().catch(() => {}) })
  assert.equal(await reaches(none, 'allowed.test'), false)
  assert.equal(await reaches(none, '198.18.0.10'), false)
  assert.equal((await none.getInfo()).allowInternetAccess, false)

  const only = await Sandbox.create(template, { allowInternetAccess: false, network: { allowOut: ['198.18.0.10'] } })
  t.after(async () => { await only.kill().catch(() => {}) })
  assert.equal(await reaches(only, '198.18.0.10'), true)
  assert.equal(await reaches(only, '198.18.0.20'), false)
  assert.equal((await only.getInfo()).allowInternetAccess, false)
})

test('an invalid CIDR or a domain in denyOut is an error from create naming the field', async () => {
  await assert.rejects(Sandbox.create(template, { network: { allowOut: ['10.0.0.300/8'] } }), /network\.allowOut\[0\]/)
  await assert.rejects(Sandbox.create(template, { network: { denyOut: [ALL_TRAFFIC, 'denied.test'] } }), /network\.denyOut\[1\]/)
})

test('a wrong API key is an AuthenticationError', async () => {
  await assert.rejects(Sandbox.list({ apiKey: 'not-a-key' }).nextItems(), (err) => {
    assert.ok(err instanceof AuthenticationError, `got ${err}`)
    return true
  })
  await assert.rejects(Sandbox.create(template, { apiKey: 'not-a-key' }), AuthenticationError)
})
