// Acceptance test of the code interpreter: the unmodified
// @e2b/code-interpreter SDK against a running sandbox-dev
// (hack/test.d/52-real-sandbox.sh). Sandbox.create() names no template, so
// it asks for the SDK's default, "code-interpreter-v1", which the gateway
// sends to the default pool; the agent serves port 49999 itself (python
// only, no Jupyter: docs/API.md#code-interpreter).
//
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the SDK's own);
// HEARTH_SKIP_INTERPRETER, when set, skips every test with that reason.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const skip = process.env.HEARTH_SKIP_INTERPRETER || false

async function withSandbox(fn) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

test('runCode: the last expression, state across calls, stdout, stderr', { skip }, async () => {
  await withSandbox(async (sbx) => {
    let t = Date.now()
    const first = await sbx.runCode('x = 6*7\nx')
    const firstMs = Date.now() - t
    assert.equal(first.error, undefined)
    assert.equal(first.results[0].text, '42')
    assert.equal(first.results[0].isMainResult, true)
    assert.equal(first.text, '42')
    t = Date.now()
    const again = await sbx.runCode('x + 1')
    const warmMs = Date.now() - t
    assert.equal(again.text, '43')
    assert.equal(again.executionCount, 2)
    console.log(`runCode through the gateway: first ${firstMs} ms (python3 start), warm ${warmMs} ms`)

    const seen = []
    const out = await sbx.runCode("import sys\nprint('hello')\nprint('oops', file=sys.stderr)", {
      onStdout: (m) => seen.push(m.line),
    })
    assert.deepEqual(out.logs.stdout, ['hello\n'])
    assert.deepEqual(out.logs.stderr, ['oops\n'])
    assert.deepEqual(seen, ['hello\n'])
    assert.equal(out.results.length, 0)

    const who = await sbx.runCode('import getpass, os\n(getpass.getuser(), os.getcwd())')
    assert.equal(who.text, "('user', '/home/user')")
  })
})

test('runCode: errors, envs, a timeout interrupts and keeps the context', { skip }, async () => {
  await withSandbox(async (sbx) => {
    await sbx.runCode('kept = 1')
    const e = await sbx.runCode('1/0')
    assert.equal(e.error.name, 'ZeroDivisionError')
    assert.equal(e.error.value, 'division by zero')
    assert.match(e.error.traceback, /1\/0/)
    assert.match(e.error.traceback, /ZeroDivisionError: division by zero/)

    const env = await sbx.runCode("import os\nos.environ.get('FOO')", { envs: { FOO: 'bar' } })
    assert.equal(env.text, "'bar'")
    const gone = await sbx.runCode("repr(os.environ.get('FOO'))")
    assert.equal(gone.text, "'None'")

    await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 }), /timed out/i)
    const after = await sbx.runCode('kept')
    assert.equal(after.text, '1', 'the interrupted context kept its state')

    await assert.rejects(sbx.runCode('1', { language: 'javascript' }), /400/)
  })
})

test('code contexts: create, list, restart, remove', { skip }, async () => {
  await withSandbox(async (sbx) => {
    await sbx.runCode('shared = 1')
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/tmp')
    assert.equal((await sbx.runCode('shared', { context: ctx })).error.name, 'NameError')
    assert.equal((await sbx.runCode('import os\nmine = os.getcwd()\nmine', { context: ctx })).text, "'/tmp'")
    assert.equal((await sbx.runCode('shared')).text, '1', 'the default context is its own')

    const ids = (await sbx.listCodeContexts()).map((c) => c.id)
    assert.ok(ids.includes(ctx.id), `${ctx.id} not in ${ids}`)

    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('mine', { context: ctx })).error.name, 'NameError')

    await sbx.removeCodeContext(ctx.id)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/)
  })
})

test('a matplotlib plot comes back as a PNG result', { skip }, async () => {
  await withSandbox(async (sbx) => {
    const t = Date.now()
    const r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
    console.log(`a first matplotlib plot: ${Date.now() - t} ms`)
    assert.equal(r.error, undefined, r.error && r.error.traceback)
    assert.deepEqual(r.logs.stderr, [])
    assert.equal(r.results.length, 1)
    const [fig] = r.results
    assert.equal(fig.isMainResult, false)
    assert.match(fig.text, /^<Figure size \d+x\d+ with 1 Axes>$/)
    assert.ok(Buffer.from(fig.png, 'base64').subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'png is a PNG')
  })
})
