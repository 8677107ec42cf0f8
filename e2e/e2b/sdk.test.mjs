// Acceptance test: the unmodified e2b JS SDK (e2b@2.51.0) against Hearth's
// e2b gateway. The harness (e2b/sdk_test.go, or hack/test.d/50-e2b-sdk.sh)
// starts the gateway and points the SDK at it with E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY; HEARTH_E2B_TEMPLATE names a template
// with warm capacity.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, AuthenticationError } from 'e2b'

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

test('a wrong API key is an AuthenticationError', async () => {
  await assert.rejects(Sandbox.list({ apiKey: 'not-a-key' }).nextItems(), (err) => {
    assert.ok(err instanceof AuthenticationError, `got ${err}`)
    return true
  })
  await assert.rejects(Sandbox.create(template, { apiKey: 'not-a-key' }), AuthenticationError)
})
