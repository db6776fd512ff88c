'use strict'
// Small statistics and formatting helpers shared by the benchmark sections.

/** Linear-interpolated percentile of an ascending array (the Go bench's rule). */
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN
  const rank = (p / 100) * (sorted.length - 1)
  const lo = Math.floor(rank)
  const hi = Math.ceil(rank)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo)
}

/** {n, mean, p50, p99, max} of a list of numbers (any unit). */
function summarize(values) {
  const s = Float64Array.from(values).sort()
  let sum = 0
  for (const v of s) sum += v
  return { n: s.length, mean: s.length ? sum / s.length : NaN, p50: percentile(s, 50), p99: percentile(s, 99), max: s.length ? s[s.length - 1] : NaN }
}

/** Median of numbers. */
function median(values) {
  return percentile(Float64Array.from(values).sort(), 50)
}

/** Human number: 12 345, 1 234.5, 12.3, 0.123. */
function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–'
  if (!Number.isFinite(v)) return String(v)
  const d = digits ?? (Math.abs(v) >= 1000 ? 0 : Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : Math.abs(v) >= 1 ? 2 : 3)
  const s = v.toFixed(d)
  const [int, frac] = s.split('.')
  const grouped = int.replace(/\B(?=(\d{3})+(?!\d))/g, '\u202f')
  return frac ? `${grouped}.${frac}` : grouped
}

/** Ratio as `1.23×`, or `–`. */
function ratio(a, b) {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return '–'
  const r = a / b
  return `${r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`
}

/** Markdown table from a header and rows (arrays of strings). */
function table(header, rows) {
  const out = [`| ${header.join(' | ')} |`, `| ${header.map((h, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`]
  for (const r of rows) out.push(`| ${r.join(' | ')} |`)
  return out.join('\n')
}

module.exports = { percentile, summarize, median, num, ratio, table }
