/**
 * The seven stars of the Big Dipper (北斗, Beidou), from their right ascension and
 * declination, joined as the asterism is drawn. An SVG, so it needs no font.
 */
export const STARS: ReadonlyArray<readonly [number, number, number]> = [
  [60.6, 3.6, 3.2], // Dubhe
  [61.1, 16.4, 3.0], // Merak
  [43.3, 22.9, 3.0], // Phecda
  [35.9, 15.0, 2.4], // Megrez
  [22.7, 17.4, 3.2], // Alioth
  [12.4, 20.0, 3.1], // Mizar
  [4.2, 33.5, 3.1], // Alkaid
];
/** Alkaid → Mizar → Alioth → Megrez → Dubhe → Merak → Phecda → Megrez. */
const PATH = [6, 5, 4, 3, 0, 1, 2, 3].map((i, n) => `${n === 0 ? 'M' : 'L'}${STARS[i]![0]} ${STARS[i]![1]}`).join(' ');

export function Logo({ size = 30 }: { size?: number }) {
  return (
    <svg
      class="logo"
      width={size * 1.8}
      height={size}
      viewBox="0 0 66 37"
      overflow="visible"
      role="img"
      aria-label="Beidou logo: the seven stars of the Big Dipper"
    >
      <path
        d={PATH}
        fill="none"
        stroke="currentColor"
        stroke-opacity="0.45"
        stroke-width="1.2"
        stroke-linejoin="round"
      />
      {STARS.map(([x, y, r], i) => (
        <circle key={i} cx={x} cy={y} r={r} class="star" />
      ))}
    </svg>
  );
}
