-- ktune config cache, schema version 3. This file is compiled into the
-- library; a running ktune never reads it from disk. Table and column names
-- are fixed: people and scripts rely on them (docs/cache.md).

CREATE TABLE IF NOT EXISTS meta (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

-- The winning config per (kernel, spec hash, device, key). key and config
-- are canonical JSON (sorted fields, no spaces): json_extract(key, '$.D').
CREATE TABLE IF NOT EXISTS configs (
  kernel         TEXT NOT NULL,
  spec_hash      TEXT NOT NULL,
  device         TEXT NOT NULL,
  key            TEXT NOT NULL,
  config         TEXT NOT NULL,
  time_us        REAL NOT NULL,
  candidates     INTEGER NOT NULL DEFAULT 0,
  rejected       INTEGER NOT NULL DEFAULT 0,
  nvrtc_version  TEXT NOT NULL DEFAULT '',
  driver_version TEXT NOT NULL DEFAULT '',
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  PRIMARY KEY (kernel, spec_hash, device, key)
) WITHOUT ROWID;

-- Every candidate measured for a key, kept per (key, config) so that a
-- config added to a space later is the only one measured next time.
CREATE TABLE IF NOT EXISTS trials (
  kernel      TEXT NOT NULL,
  spec_hash   TEXT NOT NULL,
  device      TEXT NOT NULL,
  key         TEXT NOT NULL,
  config      TEXT NOT NULL,
  status      TEXT NOT NULL CHECK (status IN ('ok', 'mismatch', 'oob_write', 'fault',
                                              'compile_error', 'resources', 'timeout')),
  median_us   REAL,
  spread_us   REAL,
  registers   INTEGER,
  smem_bytes  INTEGER,
  spill_bytes INTEGER,
  detail      TEXT NOT NULL DEFAULT '',
  measured_at INTEGER NOT NULL,
  PRIMARY KEY (kernel, spec_hash, device, key, config)
) WITHOUT ROWID;

-- Compiled cubins, keyed by a hash of (source, compile-time constants,
-- options, architecture, NVRTC version).
CREATE TABLE IF NOT EXISTS binaries (
  hash          TEXT PRIMARY KEY,
  kernel        TEXT NOT NULL,
  spec_hash     TEXT NOT NULL DEFAULT '',
  arch          TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  constants     TEXT NOT NULL,
  registers     INTEGER,
  smem_bytes    INTEGER,
  spill_bytes   INTEGER,
  size          INTEGER NOT NULL,
  cubin         BLOB NOT NULL,
  created_at    INTEGER NOT NULL
);

-- Configs that faulted or hung: no process tries them again for that key.
CREATE TABLE IF NOT EXISTS quarantine (
  kernel    TEXT NOT NULL,
  spec_hash TEXT NOT NULL,
  device    TEXT NOT NULL,
  key       TEXT NOT NULL,
  config    TEXT NOT NULL,
  reason    TEXT NOT NULL,
  since     INTEGER NOT NULL,
  pid       INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (kernel, spec_hash, device, key, config)
) WITHOUT ROWID;

-- Who is tuning a key right now, so that two processes do not tune the
-- same key at the same moment. A lease past expires_at, or held by a
-- process of this host that no longer exists, is taken over.
CREATE TABLE IF NOT EXISTS leases (
  kernel     TEXT NOT NULL,
  spec_hash  TEXT NOT NULL,
  device     TEXT NOT NULL,
  key        TEXT NOT NULL,
  host       TEXT NOT NULL,
  pid        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (kernel, spec_hash, device, key)
) WITHOUT ROWID;

CREATE VIEW IF NOT EXISTS v_configs AS
  SELECT kernel, device, key, config, round(time_us, 2) AS time_us, candidates, rejected,
         CAST(strftime('%s', 'now') AS INTEGER) - updated_at AS age_s
  FROM configs;

CREATE VIEW IF NOT EXISTS v_trials AS
  SELECT kernel, device, key, config, status, round(median_us, 2) AS median_us,
         round(spread_us, 2) AS spread_us, registers, smem_bytes, spill_bytes, detail
  FROM trials;
