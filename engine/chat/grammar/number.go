package grammar

import (
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
)

// numCons holds a number's bounds (minimum, maximum, exclusive bounds) and
// multipleOf. Numbers under constraints are written without an exponent,
// so the values a prefix can still become are unions of integer intervals
// at each scale: N/10^f for N in [P·10^j, (P+1)·10^j) where P is the
// digits so far. That makes the check exact: a prefix is allowed only if
// some completion within MaxNumberLen satisfies every constraint.
type numCons struct {
	lo, hi     *big.Rat
	loEx, hiEx bool
	mult       *big.Rat
	integer    bool

	cache   sync.Map // prefix → numInfo
	entries atomic.Int64
}

// maxNumCache bounds the prefixes a numCons remembers (it is shared by
// every schema with the same constraints, for the life of the process).
const maxNumCache = 1 << 16

type numInfo struct {
	ok    bool
	extra int // fewest bytes to append for a valid number
}

var ten = big.NewInt(10)

func pow10(n int) *big.Int { return new(big.Int).Exp(ten, big.NewInt(int64(n)), nil) }

// final reports whether lit is a complete number meeting the constraints.
func (c *numCons) final(lit string) bool {
	if lit == "" || lit == "-" || strings.HasSuffix(lit, ".") {
		return false
	}
	v, ok := new(big.Rat).SetString(lit)
	if !ok {
		return false
	}
	return c.holds(v)
}

func (c *numCons) holds(v *big.Rat) bool {
	if c.integer && !v.IsInt() {
		return false
	}
	if c.lo != nil {
		if x := v.Cmp(c.lo); x < 0 || x == 0 && c.loEx {
			return false
		}
	}
	if c.hi != nil {
		if x := v.Cmp(c.hi); x > 0 || x == 0 && c.hiEx {
			return false
		}
	}
	if c.mult != nil {
		q := new(big.Rat).Quo(v, c.mult)
		if !q.IsInt() {
			return false
		}
	}
	return true
}

// info says whether the prefix lit (no exponent) can still become a valid
// number and how many bytes that takes at least.
func (c *numCons) info(lit string) numInfo {
	if v, ok := c.cache.Load(lit); ok {
		return v.(numInfo)
	}
	r := c.compute(lit)
	if c.entries.Load() < maxNumCache {
		c.entries.Add(1)
		c.cache.Store(lit, r)
	}
	return r
}

func (c *numCons) compute(lit string) numInfo {
	room := MaxNumberLen - len(lit)
	if room < 0 {
		return numInfo{}
	}
	neg := strings.HasPrefix(lit, "-")
	body := strings.TrimPrefix(lit, "-")
	if body == "" {
		best := numInfo{}
		for d := '0'; d <= '9'; d++ {
			if i := c.info(lit + string(d)); i.ok && (!best.ok || i.extra+1 < best.extra) {
				best = numInfo{ok: true, extra: i.extra + 1}
			}
		}
		return best
	}
	intPart, frac, dot := strings.Cut(body, ".")
	digits := new(big.Int)
	digits.SetString(intPart+frac, 10)
	f0 := len(frac)
	for extra := 0; extra <= room; extra++ {
		if dot {
			// f = f0+extra fraction digits in all.
			f := f0 + extra
			if f == 0 {
				continue
			}
			if c.integer && extra > 0 {
				// Zeros only: the value stays the integer part.
				if c.rangeOK(digits, 0, f0, neg) {
					return numInfo{ok: true, extra: extra}
				}
				continue
			}
			if c.rangeOK(digits, extra, f, neg) {
				return numInfo{ok: true, extra: extra}
			}
			continue
		}
		// No dot yet: k more integer digits, then maybe "." and f digits.
		for k := 0; k <= extra; k++ {
			if k > 0 && intPart == "0" {
				break
			}
			rest := extra - k
			f := 0
			switch {
			case rest == 0:
			case rest == 1:
				continue // a lone "." is not a number
			default:
				f = rest - 1
			}
			if c.integer && f > 0 {
				continue // a zero fraction never helps an integer
			}
			if c.rangeOK(digits, k+f, f, neg) {
				return numInfo{ok: true, extra: extra}
			}
		}
	}
	return numInfo{}
}

// rangeOK reports whether some N in [P·10^j, (P+1)·10^j − 1], read as
// ±N/10^f, meets the constraints.
func (c *numCons) rangeOK(p *big.Int, j, f int, neg bool) bool {
	scale := pow10(j)
	lo := new(big.Int).Mul(p, scale)
	hi := new(big.Int).Add(lo, scale)
	hi.Sub(hi, big.NewInt(1))
	den := pow10(f)
	// Bounds on N from the value bounds.
	vlo, vhi, vloEx, vhiEx := c.lo, c.hi, c.loEx, c.hiEx
	if neg {
		// value = -N/den: lo ≤ -N/den ≤ hi  ⇔  -hi ≤ N/den ≤ -lo.
		vlo, vhi, vloEx, vhiEx = negRat(c.hi), negRat(c.lo), c.hiEx, c.loEx
	}
	if vlo != nil {
		b := new(big.Rat).Mul(vlo, new(big.Rat).SetInt(den))
		n := ceilRat(b)
		if vloEx && new(big.Rat).SetInt(n).Cmp(b) == 0 {
			n.Add(n, big.NewInt(1))
		}
		if n.Cmp(lo) > 0 {
			lo = n
		}
	}
	if vhi != nil {
		b := new(big.Rat).Mul(vhi, new(big.Rat).SetInt(den))
		n := floorRat(b)
		if vhiEx && new(big.Rat).SetInt(n).Cmp(b) == 0 {
			n.Sub(n, big.NewInt(1))
		}
		if n.Cmp(hi) < 0 {
			hi = n
		}
	}
	if lo.Cmp(hi) > 0 {
		return false
	}
	if c.mult == nil {
		return true
	}
	// ±N/den is a multiple of p/q ⇔ N ≡ 0 mod den·p/gcd(den·p, q).
	dp := new(big.Int).Mul(den, c.mult.Num())
	g := new(big.Int).GCD(nil, nil, dp, c.mult.Denom())
	m := new(big.Int).Quo(dp, g)
	first := new(big.Int).Add(lo, new(big.Int).Sub(m, big.NewInt(1)))
	first.Quo(first, m)
	first.Mul(first, m)
	if lo.Sign() < 0 {
		// lo is never negative here (N ≥ 0), kept for safety.
		first = ceilDiv(lo, m)
		first.Mul(first, m)
	}
	return first.Cmp(hi) <= 0
}

func negRat(r *big.Rat) *big.Rat {
	if r == nil {
		return nil
	}
	return new(big.Rat).Neg(r)
}

func floorRat(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q
}

func ceilRat(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func ceilDiv(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// minLen is the fewest bytes of a valid number (false: none exists).
func (c *numCons) minLen() (int, bool) {
	best, ok := 0, false
	for _, s := range []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "-"} {
		if i := c.info(s); i.ok && (!ok || 1+i.extra < best) {
			best, ok = 1+i.extra, true
		}
	}
	return best, ok
}
