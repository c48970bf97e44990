/** TIN rules of SPEC §0: 10 ASCII digits, first 1–9, last a Luhn check digit over the first nine. */

export const TIN_PATTERN = "^[1-9][0-9]{9}$";
const TIN_RE = new RegExp(TIN_PATTERN);

/** Luhn check digit for a digit string (the digit that makes `payload + digit` pass Luhn). */
export function luhnCheckDigit(payload: string): number {
	let sum = 0;
	for (let i = 0; i < payload.length; i++) {
		// Double every second digit counting from the right of the payload (the check digit will be rightmost).
		let digit = payload.charCodeAt(payload.length - 1 - i) - 48;
		if (i % 2 === 0) {
			digit *= 2;
			if (digit > 9) digit -= 9;
		}
		sum += digit;
	}
	return (10 - (sum % 10)) % 10;
}

export function isValidTin(value: string): boolean {
	if (!TIN_RE.test(value)) return false;
	return luhnCheckDigit(value.slice(0, 9)) === value.charCodeAt(9) - 48;
}

/** The TIN of a 9-digit sequence number (100000000 → 1000000008). */
export function tinFromSequence(sequence: number): string {
	const payload = String(sequence);
	if (!/^[1-9][0-9]{8}$/.test(payload)) throw new RangeError(`TIN sequence out of range: ${sequence}`);
	return payload + luhnCheckDigit(payload);
}

/** Consecutive sequence numbers, from `start` up to and without `end`. */
export interface SequenceRun {
	start: number;
	end: number;
}

/** A TIN's 9-digit sequence number (its check digit left off). */
export const sequenceOf = (tin: string): number => Number(tin.slice(0, 9));

/**
 * `runs` (sorted, apart) with `sequences` (any order, repeats allowed) added, as sorted runs that
 * neither overlap nor touch. One pass after a numeric sort, with no object per number: a seed of
 * a million TINs is read whole as a process starts.
 */
export function withSequences(runs: readonly SequenceRun[], sequences: Iterable<number>): SequenceRun[] {
	const added = Float64Array.from(sequences).sort();
	const merged: SequenceRun[] = [];
	const add = (start: number, end: number) => {
		const last = merged[merged.length - 1];
		if (last && start <= last.end) last.end = Math.max(last.end, end);
		else merged.push({ start, end });
	};
	let next = 0;
	for (const run of runs) {
		for (; next < added.length && added[next] < run.start; next++) add(added[next], added[next] + 1);
		add(run.start, run.end);
	}
	for (; next < added.length; next++) add(added[next], added[next] + 1);
	return merged;
}

/** The first sequence number from `n` on that lies in none of `runs` (sorted, apart), by binary search. */
export function firstOutside(runs: readonly SequenceRun[], n: number): number {
	let low = 0;
	let high = runs.length;
	while (low < high) {
		const middle = (low + high) >>> 1;
		if (runs[middle].start <= n) low = middle + 1;
		else high = middle;
	}
	const run = runs[low - 1];
	return run && n < run.end ? run.end : n;
}
