'use strict'
// Runs a benchmark worker in its own process and returns the JSON object it prints last on stdout.

const { spawn } = require('node:child_process')

/**
 * @param {string} cmd
 * @param {string[]} args
 * @param {{timeoutMs?: number, env?: object, cwd?: string}} [options]
 * @returns {Promise<{result: any, stdout: string, stderr: string, code: number|null}>}
 */
function runJson(cmd, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: options.env ?? process.env, cwd: options.cwd })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    const timer = options.timeoutMs
      ? setTimeout(() => {
          child.kill('SIGKILL')
        }, options.timeoutMs)
      : null
    child.on('error', reject)
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer)
      const lines = stdout.trim().split('\n').filter(Boolean)
      let result
      try {
        result = JSON.parse(lines[lines.length - 1])
      } catch {
        const why = signal ? `killed by ${signal}` : `exit ${code}`
        reject(failure(why, stderr, cmd, args))
        return
      }
      if (code !== 0) {
        reject(failure(`exit ${code}`, stderr, cmd, args))
        return
      }
      resolve({ result, stdout, stderr, code })
    })
  })
}

/** An Error whose first line is the worker's own complaint (the first line of its stderr that says what failed). */
function failure(why, stderr, cmd, args) {
  const lines = stderr.trim().split('\n').filter(Boolean)
  const said = lines.find((l) => /Error|error|failed/.test(l)) || lines[lines.length - 1] || 'no output'
  const e = new Error(`${said.trim()} (${why})\n${lines.slice(0, 12).join('\n')}\ncommand: ${cmd} ${args.join(' ')}`)
  return e
}

module.exports = { runJson }
