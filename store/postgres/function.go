package postgres

import "strings"

// functionSQL is the one-round-trip version of a call: a PL/pgSQL
// function that takes the advisory locks, reads clock_timestamp() after
// them, decides every counter with the arithmetic of package limiter
// (exact, in numeric where limiter uses 128-bit products) and records,
// all inside the one statement that calls it. It is installed with
// CREATE OR REPLACE at New when Config.Mode is OneRoundTrip, and must
// give the same answers as limiter's vectors (the tests run them).
//
// Arguments are parallel arrays over the batch's distinct counters;
// p_now, when not null, replaces the clock (tests). p_ends holds three
// values per counter: for a calendar fixed window the boundaries of
// limiter.CalendarEnds (PL/pgSQL reads no Go zone rules; the database's
// clock picks its window among them, limiter.FixedEndAmong), zeros
// otherwise. p_bursts holds each counter's capacity (limiter's
// Limit.Capacity: a token bucket's burst, Uses otherwise); p_debit makes
// the batch a debit (limiter's DecideDebit, recorded whatever the
// outcome). It returns the clock reading and, per counter, allowed,
// remaining, wait, reset, the receipt's window start (sliding window),
// arrival time (token bucket) or window end (fixed window), and for a
// recorded token bucket the stamp of its live moves record (mi, mv: its
// incarnation and moved µs, from the row of alg 100, sqlstore.MovesAlg;
// zeros when it has none).
//
// The moves record's outputs changed the function's return type, which
// CREATE OR REPLACE cannot do: the DO block drops a version without them
// first (its callers select columns by name, so a process of the older
// code calls the new version unchanged).
const functionSQL = `DROP FUNCTION IF EXISTS {T}_decide(bytea[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean, bigint);
DROP FUNCTION IF EXISTS {T}_decide(bytea[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean, bigint, bigint[]);
DO $old$ BEGIN
	IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('{T}_decide(bytea[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean, bigint, bigint[], bigint[], boolean)')
		AND NOT 'mi' = ANY(proargnames)) THEN
		DROP FUNCTION {T}_decide(bytea[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean, bigint, bigint[], bigint[], boolean);
	END IF;
END $old$;
CREATE OR REPLACE FUNCTION {T}_decide(
	p_keys bytea[], p_algs smallint[], p_wins bigint[], p_uses bigint[], p_costs bigint[],
	p_ids bigint[], p_locks bigint[], p_record boolean, p_now bigint, p_ends bigint[],
	p_bursts bigint[], p_debit boolean,
	OUT now_us bigint, OUT ok boolean[], OUT rem bigint[], OUT wt bigint[], OUT rs bigint[], OUT rc bigint[],
	OUT mi bigint[], OUT mv bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
	mx constant numeric := 9223372036854775807;
	n int := coalesce(array_length(p_keys, 1), 0);
	all_ok boolean := true;
	sa bigint[] := '{}'; sb bigint[] := '{}'; sc bigint[] := '{}';
	k bytea; g smallint; w bigint; lw bigint; u bigint; c bigint; bb bigint; cw numeric; c2 bigint;
	a bigint; b bigint; cc bigint; total bigint; last bigint; need bigint; at_ numeric;
	e bigint; used numeric; x numeric; nowx numeric; debt numeric; stp numeric; r numeric;
BEGIN
	IF p_record THEN
		PERFORM pg_advisory_xact_lock(l) FROM unnest(p_locks) AS l;
	END IF;
	now_us := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
	ok := '{}'; rem := '{}'; wt := '{}'; rs := '{}'; rc := '{}';
	mi := array_fill(0::bigint, ARRAY[n]); mv := array_fill(0::bigint, ARRAY[n]);
	FOR i IN 1..n LOOP
		k := p_keys[i]; g := p_algs[i]; w := p_wins[i]; u := p_uses[i]; c := p_costs[i]; bb := p_bursts[i];
		-- a concurrency limit (4) is a log whose rows lie under -w (LogWin)
		lw := CASE WHEN g = 4 THEN -w ELSE w END;
		a := 0; b := 0; cc := 0;
		IF c > bb AND NOT p_debit THEN
			ok[i] := false; rem[i] := bb; wt[i] := mx; rs[i] := 0;
		ELSIF g = 0 OR g = 4 THEN
			SELECT coalesce(sum(l.cost), 0), max(l.at_us) INTO total, last
				FROM {T}_log l WHERE l.ckey = k AND l.win_us = lw AND l.exp_us > now_us;
			IF p_debit THEN -- recorded whatever; allowed unless already over
				ok[i] := total <= u; rem[i] := greatest(u - (total + c), 0); wt[i] := 0;
				rs[i] := least(now_us::numeric + w, mx);
				IF NOT ok[i] THEN -- one more use: total + c + 1 - u must leave
					need := total + c + 1 - u;
					SELECT q.at_us INTO a FROM (
						SELECT l.at_us, l.id, sum(l.cost) OVER (ORDER BY l.at_us, l.id ROWS UNBOUNDED PRECEDING) AS cum
						FROM {T}_log l WHERE l.ckey = k AND l.win_us = lw AND l.exp_us > now_us) q
					WHERE q.cum >= need ORDER BY q.at_us, q.id LIMIT 1;
					IF FOUND THEN wt[i] := greatest(least(a::numeric + w, mx) - now_us, 1);
					ELSE wt[i] := w; END IF; -- the debit itself must leave
				END IF;
			ELSIF total + c <= u THEN
				ok[i] := true; rem[i] := u - total - c; wt[i] := 0; rs[i] := least(now_us::numeric + w, mx);
			ELSE
				need := total + c - u;
				SELECT q.at_us INTO a FROM (
					SELECT l.at_us, l.id, sum(l.cost) OVER (ORDER BY l.at_us, l.id ROWS UNBOUNDED PRECEDING) AS cum
					FROM {T}_log l WHERE l.ckey = k AND l.win_us = lw AND l.exp_us > now_us) q
				WHERE q.cum >= need ORDER BY q.at_us, q.id LIMIT 1;
				ok[i] := false; rem[i] := greatest(u - total, 0);
				wt[i] := least(a::numeric + w, mx) - now_us;
				rs[i] := CASE WHEN last IS NULL THEN now_us ELSE least(last::numeric + w, mx) END;
			END IF;
		ELSE
			SELECT t.a, t.b, t.c INTO a, b, cc FROM {T} t WHERE t.ckey = k AND t.alg = g AND t.win_us = w;
			IF NOT FOUND THEN a := 0; b := 0; cc := 0; END IF;
			IF g = 1 THEN -- sliding window: a, b, cc = Start, Curr, Prev
				IF b = 0 AND cc = 0 THEN
					a := now_us - mod(mod(now_us, w) + w, w);
				ELSIF now_us >= a THEN
					IF (now_us - a) / w = 1 THEN
						cc := b; b := 0; a := a + w;
					ELSIF (now_us - a) / w > 1 THEN
						cc := 0; b := 0; a := now_us - mod(mod(now_us, w) + w, w);
					END IF;
				END IF;
				e := greatest(now_us - a, 0);
				used := b + least(div(cc::numeric * (w - e) + w - 1, w), mx);
				IF p_debit THEN
					ok[i] := used <= u; rem[i] := greatest(u - (used + c), 0); wt[i] := 0;
					rs[i] := least(a::numeric + 2 * w, mx);
					IF NOT ok[i] THEN -- one more use after the debit: Curr is b + c
						c2 := least(b::numeric + c, mx);
						IF c2 + 1 <= u THEN
							at_ := least(a::numeric + (w - least(div((u - c2 - 1)::numeric * w, cc), mx)), mx);
						ELSE
							at_ := least(least(a::numeric + w, mx) + (w - least(div((u - 1)::numeric * w, c2), mx)), mx);
						END IF;
						wt[i] := greatest(at_ - now_us, 1);
					END IF;
				ELSIF used + c <= u THEN
					ok[i] := true; rem[i] := u - used - c; wt[i] := 0; rs[i] := least(a::numeric + 2 * w, mx);
				ELSE
					IF b + c <= u THEN
						at_ := least(a::numeric + (w - least(div((u - b - c)::numeric * w, cc), mx)), mx);
					ELSE
						at_ := least(least(a::numeric + w, mx) + (w - least(div((u - c)::numeric * w, b), mx)), mx);
					END IF;
					ok[i] := false; rem[i] := greatest(u - used, 0); wt[i] := greatest(at_ - now_us, 1);
					rs[i] := CASE WHEN b > 0 THEN least(a::numeric + 2 * w, mx) WHEN cc > 0 THEN least(a::numeric + w, mx) ELSE a END;
				END IF;
			ELSIF g = 3 THEN -- fixed window: a, b = End, Count
				cc := 0;
				IF b = 0 OR now_us >= a THEN
					b := 0;
					IF p_ends[3 * i - 1] = 0 THEN -- aligned to the epoch
						a := least((now_us - mod(mod(now_us, w) + w, w))::numeric + w, mx);
					ELSIF now_us < p_ends[3 * i - 2] THEN a := p_ends[3 * i - 2];
					ELSIF now_us < p_ends[3 * i - 1] THEN a := p_ends[3 * i - 1];
					ELSIF now_us < p_ends[3 * i] THEN a := p_ends[3 * i];
					ELSE
						RAISE EXCEPTION 'ringlimit: the database clock is more than a calendar window ahead of the caller''s';
					END IF;
				END IF;
				IF p_debit THEN
					ok[i] := b <= u; rem[i] := greatest(u::numeric - b - c, 0); rs[i] := a;
					wt[i] := CASE WHEN b <= u THEN 0 ELSE greatest(a - now_us, 1) END;
				ELSIF c <= u - b THEN
					ok[i] := true; rem[i] := u - b - c; wt[i] := 0; rs[i] := a;
				ELSE
					ok[i] := false; rem[i] := greatest(u - b, 0); wt[i] := greatest(a - now_us, 1); rs[i] := a;
				END IF;
			ELSE -- token bucket: a, b, cc = TAT, Rem, Uses
				r := b;
				IF cc <> u AND cc > 0 THEN r := least(div(b::numeric * u, cc), mx); END IF;
				x := a::numeric * u + r;
				nowx := now_us::numeric * u;
				IF x < nowx THEN x := nowx; END IF;
				debt := x - nowx; stp := c::numeric * w; cw := bb::numeric * w; -- capacity: the burst
				IF p_debit THEN -- recorded whatever: the bucket may go below zero
					ok[i] := debt <= cw;
					rem[i] := greatest(bb - least(div(debt + stp + w - 1, w), mx), 0);
					rs[i] := least(div(x + stp + u - 1, u), mx);
					wt[i] := CASE WHEN debt <= cw THEN 0
						ELSE greatest(least(div(debt + stp + w - cw + u - 1, u), mx), 1) END;
				ELSIF debt + stp <= cw THEN
					ok[i] := true; rem[i] := bb - least(div(debt + stp + w - 1, w), mx); wt[i] := 0;
					rs[i] := least(div(x + stp + u - 1, u), mx);
				ELSE
					ok[i] := false; rem[i] := greatest(bb - least(div(debt + w - 1, w), mx), 0);
					wt[i] := greatest(least(div(debt + stp - cw + u - 1, u), mx), 1);
					rs[i] := least(div(x + u - 1, u), mx);
				END IF;
				-- the stamp of a live moves record, for the receipt
				IF p_record THEN
					SELECT t.a, t.b INTO a, b FROM {T} t WHERE t.ckey = k AND t.alg = 100 AND t.win_us = w AND t.c > now_us;
					IF FOUND THEN mi[i] := a; mv[i] := b; END IF;
				END IF;
				-- keep the arrival time after this call for the record pass
				x := x + stp;
				a := least(div(x, u), mx); b := mod(x, u); cc := u;
			END IF;
		END IF;
		sa[i] := a; sb[i] := b; sc[i] := cc;
		all_ok := all_ok AND ok[i];
	END LOOP;
	rc := array_fill(0::bigint, ARRAY[n]);
	IF NOT (p_record AND (all_ok OR p_debit)) THEN
		IF p_record THEN -- a key's expired uses go when it is next used
			DELETE FROM {T}_log l USING unnest(p_keys, p_algs, p_wins) AS v(k, g, w)
				WHERE v.g IN (0, 4) AND l.ckey = v.k AND l.win_us = CASE WHEN v.g = 4 THEN -v.w ELSE v.w END AND l.exp_us <= now_us;
		END IF;
		RETURN;
	END IF;
	DELETE FROM {T}_log l USING unnest(p_keys, p_algs, p_wins) AS v(k, g, w)
		WHERE v.g IN (0, 4) AND l.ckey = v.k AND l.win_us = CASE WHEN v.g = 4 THEN -v.w ELSE v.w END AND l.exp_us <= now_us;
	FOR i IN 1..n LOOP
		k := p_keys[i]; g := p_algs[i]; w := p_wins[i]; c := p_costs[i];
		IF g = 0 OR g = 4 THEN
			INSERT INTO {T}_log (ckey, win_us, id, at_us, cost, exp_us)
				VALUES (k, CASE WHEN g = 4 THEN -w ELSE w END, p_ids[i], now_us, c, least(now_us::numeric + w, mx));
			a := 0; b := 0; cc := 0; e := least(now_us::numeric + w, mx);
		ELSIF g = 1 THEN
			a := sa[i]; b := sb[i] + c; cc := sc[i];
			e := least(a::numeric + 2 * w, mx); rc[i] := a;
		ELSIF g = 3 THEN
			a := sa[i]; b := sb[i] + c; cc := 0; e := a; rc[i] := a;
		ELSE
			a := sa[i]; b := sb[i]; cc := sc[i];
			e := CASE WHEN b > 0 THEN least(a::numeric + 1, mx) ELSE a END; rc[i] := e;
		END IF;
		INSERT INTO {T} (ckey, alg, win_us, a, b, c, exp_us) VALUES (k, g, w, a, b, cc, e)
			ON CONFLICT (ckey, alg, win_us) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c, exp_us = EXCLUDED.exp_us;
	END LOOP;
END
$fn$`

func functionFor(table string) string { return strings.ReplaceAll(functionSQL, "{T}", table) }
