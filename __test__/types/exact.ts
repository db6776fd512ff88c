// `exact<A, B>(true)` type-checks only when A and B are the same type (not merely assignable): the type tests'
// way to say what a narrowed field's type is. A mismatch makes the argument `false`, refused.
export type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false
export function exact<A, B>(same: Equal<A, B>): void {
  void same
}
