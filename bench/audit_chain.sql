-- Cost of the audit hash chain per agents_event insert (migration 0014),
-- inside the server (no client round trips): 20,000 single-row INSERTs
-- shaped like the hot path's, best and median of 5 runs, with the chain
-- trigger off and on. Everything is rolled back.
--   psql -h 127.0.0.1 -U postgres -d agentdesk -f bench/audit_chain.sql
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE runs (chain text, us numeric);
CREATE FUNCTION pg_temp.run(chain text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; sid bigint;
BEGIN
  FOR r IN 1..5 LOOP
    sid := 800000000 + r + CASE WHEN chain = 'on' THEN 100 ELSE 0 END;
    t0 := clock_timestamp();
    FOR i IN 1..20000 LOOP
      INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at,
          position, role, content)
      VALUES (sid, i, 1, 'tool.finished',
          '{"name":"lookup_order","status":"succeeded","ms":12}'::json, 'w1:1', now(),
          NULL, '', NULL);
    END LOOP;
    INSERT INTO runs VALUES (chain, extract(epoch FROM clock_timestamp() - t0) * 1e6 / 20000);
  END LOOP;
END $$;
ALTER TABLE agents_event DISABLE TRIGGER agents_event_chain;
SELECT pg_temp.run('off');
ALTER TABLE agents_event ENABLE TRIGGER agents_event_chain;
SELECT pg_temp.run('on');
SELECT 'chain ' || chain || ': ' || round(min(us), 1) || ' us per insert (best), '
    || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY us)::numeric, 1) || ' (median)'
FROM runs GROUP BY chain ORDER BY chain;
ROLLBACK;
