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
