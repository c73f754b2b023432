# KiqbeatStore: kiqbeat's schedule store spoken with plain Redis commands (docs/store.md):
# add, change, pause, resume and remove schedules, and move sidekiq-cron's jobs over. No
# kiqbeat server is needed; kiqbeat validates what is written at its next invocation (for
# validation at write time, use KiqbeatClient and the console's API: kiqbeat/client.rb).
# docs/store.md prints the module between the marker lines verbatim.
# --- KiqbeatStore: begin ---
# kiqbeat's schedule store from Ruby (docs/store.md): needs the redis gem (4.x or 5.x);
# json and zlib are Ruby's own.
# `ns` is kiqbeat's key prefix (KIQBEAT_NAMESPACE; "" unless set); `shards` is N when kiqbeat
# runs as N shards (KIQBEAT_SHARD=I/N), else 1.
require "json"
require "socket"
require "time"
require "zlib"

module KiqbeatStore
  class Error < StandardError; end

  TRUTHY = /\A(true|t|yes|y|1)\z/i
  # kiqbeat never reads a definition over this many bytes as stored (it sets it aside,
  # unread): writers refuse one up front, and read none that is.
  MAX_DEFINITION_BYTES = 65_536
  # A stored definition over the limit, in place of its text: its length, not read.
  Oversized = Struct.new(:size_bytes)
  SIDEKIQ_OPTIONS = %w[retry retry_for retry_queue backtrace dead tags].freeze

  module_function

  def definitions_key(ns = "")
    "#{ns}kiqbeat:schedules"
  end

  def rejected_key(ns = "")
    "#{ns}kiqbeat:rejected"
  end

  # The name index the console lists from (docs/store.md "The name index"): a written or
  # removed name is marked (kiqbeat indexes it again when it meets it), and leaves the
  # disabled names (kiqbeat adds it back if its definition says so).
  def names_key(ns = "")
    "#{ns}kiqbeat:names"
  end

  def disabled_key(ns = "")
    "#{ns}kiqbeat:disabled"
  end

  # The due index holding `name`: with N shards, shard crc32(name) % N has its own.
  def due_key(name, ns = "", shards = 1)
    return "#{ns}kiqbeat:due" if shards == 1

    "#{ns}kiqbeat:due:#{Zlib.crc32(name) % shards}/#{shards}"
  end

  # Add or replace a schedule: `definition` is a Hash in a kiqbeat document's schedule form.
  def put(redis, name, definition, ns: "", shards: 1)
    json = JSON.generate(definition)
    fits!(name, json)
    change(redis, name, ns) do |current|
      mine!(name, current)
      writes(name, json, ns, shards)
    end
  end

  # Remove a schedule; kiqbeat's next invocation forgets its state. False if there was none.
  def remove(redis, name, ns: "", shards: 1)
    change(redis, name, ns) do |current|
      next [] if current.nil?

      mine!(name, current)
      [[:hdel, definitions_key(ns), name], [:zadd, due_key(name, ns, shards), 0, name],
       [:zadd, names_key(ns), 0, name], [:srem, disabled_key(ns), name]]
    end
  end

  # kiqbeat's bounds (core/limits.py): a pause note's characters, pending skips.
  MAX_PAUSE_NOTE_CHARS = 500
  MAX_PENDING_SKIPS = 10_000

  def paused_key(ns = "")
    "#{ns}kiqbeat:paused"
  end

  def skips_key(ns = "")
    "#{ns}kiqbeat:skips"
  end

  # Pause a schedule, a document's too: its pause record (docs/store.md "Pausing") in
  # kiqbeat:paused, with `note` (at most 500 characters), `by` (who) and, with `until:` (a
  # Time after now), an end at which it resumes by itself; its ticks until then are passed
  # over, not pushed, not owed. The definition is not read or written. False if it was
  # paused already (the note and end are replaced all the same).
  def pause(redis, name, note: "", until: nil, by: nil, ns: "", shards: 1)
    ends = binding.local_variable_get(:until) # `until` is a Ruby keyword
    note = note.to_s
    if note.length > MAX_PAUSE_NOTE_CHARS
      raise Error, "pause note: #{note.length} characters, over the limit of " \
                   "#{MAX_PAUSE_NOTE_CHARS}"
    end
    raise Error, "pause until: #{ends.inspect} must be a Time" unless ends.nil? || ends.is_a?(Time)

    was = false
    changed = change(redis, name, ns, measure_only: true) do |current|
      raise Error, "no schedule #{name.inspect} in the store" if current.nil?

      now_ms = clock_ms(redis)
      until_ms = ends && (ends.to_r * 1000).floor
      if until_ms && until_ms <= now_ms
        raise Error, "pause until: #{ends.utc.iso8601} is not in the future (Redis clock)"
      end

      was = paused?(redis, name, ns, now_ms) || enabled_false?(redis, name, ns, current)
      record = JSON.generate("note" => note, "by" => (by || default_actor).to_s,
                             "at" => now_ms, "until" => until_ms)
      [[:hset, paused_key(ns), name, record]]
    end
    changed && !was
  end

  # Resume a schedule: its pause record deleted, planned at once (from its next tick; nothing
  # of the paused span is pushed), and a pause written the older way ("enabled": false in
  # the definition) ended too. False if it was not paused.
  def resume(redis, name, ns: "", shards: 1)
    size = redis.hstrlen(definitions_key(ns), name)
    record = redis.hget(paused_key(ns), name)
    raise Error, "no schedule #{name.inspect} in the store" if size.zero? && record.nil?

    held = !record.nil? && holds?(record, clock_ms(redis))
    unless record.nil?
      redis.multi do |tx|
        tx.hdel(paused_key(ns), name)
        tx.zadd(due_key(name, ns, shards), 0, name, xx: true)
      end
    end
    # The older form, in a definition within the limit (one over it is never read).
    legacy = size.between?(1, MAX_DEFINITION_BYTES) &&
             enable(redis, name, true, ns: ns, shards: shards)
    held || legacy
  end

  # Skip the schedule's next `count` ticks (kiqbeat takes one pending skip per tick instead
  # of pushing it; shown as skipped in its history, never missed). The skips now pending.
  # Checked in a WATCHed transaction: the schedule must exist, at most 10,000 pending.
  def skip(redis, name, count = 1, ns: "")
    unless count.is_a?(Integer) && count.between?(1, MAX_PENDING_SKIPS)
      raise Error, "skip count #{count.inspect} must be a whole number from 1 to 10,000 " \
                   "(to stop it for longer, pause it)"
    end

    loop do
      done = redis.watch(definitions_key(ns), skips_key(ns)) do
        if redis.hstrlen(definitions_key(ns), name).zero?
          redis.unwatch
          raise Error, "no schedule #{name.inspect} in the store"
        end
        pending = [redis.hget(skips_key(ns), name).to_i, 0].max
        if pending + count > MAX_PENDING_SKIPS
          redis.unwatch
          raise Error, "schedule #{name.inspect} has #{pending} skips pending; #{count} more " \
                       "would pass #{bytes(MAX_PENDING_SKIPS)} (to stop it for longer, pause it)"
        end
        redis.multi { |tx| tx.hincrby(skips_key(ns), name, count) }
      end
      return done.first unless done.nil?
    end
  end

  # The Redis clock (TIME), epoch ms: the instant kiqbeat reads pauses against.
  def clock_ms(redis)
    seconds, micros = redis.time
    seconds.to_i * 1000 + micros.to_i / 1000
  end

  def default_actor
    "#{ENV.fetch('USER', 'ruby')}@#{Socket.gethostname}"
  rescue StandardError
    "ruby"
  end

  # A record in force at `now_ms`: one that is not such JSON still means paused.
  def holds?(record, now_ms)
    value = parse(record)
    ends = value && value["until"]
    !ends.is_a?(Numeric) || ends >= now_ms
  end

  def paused?(redis, name, ns, now_ms)
    record = redis.hget(paused_key(ns), name)
    !record.nil? && holds?(record, now_ms)
  end

  # The older pause form; a definition over the limit is never read (not paused that way).
  def enabled_false?(redis, name, ns, current)
    return false if current.is_a?(Oversized)

    parse(redis.hget(definitions_key(ns), name))&.fetch("enabled", true) == false
  end

  def enable(redis, name, enabled, ns: "", shards: 1)
    change(redis, name, ns) do |current|
      raise Error, "no schedule #{name.inspect} in the store" if current.nil?
      if current.is_a?(Oversized)
        raise Error, "schedule #{name.inspect}: its definition is #{bytes(current.size_bytes)} " \
                     "bytes as stored, over the limit of #{bytes(MAX_DEFINITION_BYTES)} bytes " \
                     "(not read); put it again"
      end

      definition = parse(current)
      raise Error, "schedule #{name.inspect} is not a JSON object; put it again" unless definition
      next [] if definition.fetch("enabled", true) == enabled

      json = JSON.generate(definition.merge("enabled" => enabled))
      fits!(name, json)
      writes(name, json, ns, shards)
    end
  end

  # Refuse a definition kiqbeat would set aside unread (kiqbeat's own message).
  def fits!(name, json)
    return if json.bytesize <= MAX_DEFINITION_BYTES

    raise Error, "schedule #{name.inspect}: its definition is #{bytes(json.bytesize)} bytes " \
                 "as stored, over the limit of #{bytes(MAX_DEFINITION_BYTES)} bytes; keep " \
                 "large data out of a schedule (its args carry an id, the data lives elsewhere)"
  end

  def bytes(count)
    count.to_s.reverse.scan(/\d{1,3}/).join(",").reverse
  end

  # The definition, its set-aside reason cleared, its index entry at 0: "plan me", and its
  # name marked for the index (kiqbeat indexes its facets when it meets it; out of the
  # disabled set until then).
  def writes(name, json, ns, shards)
    [[:hset, definitions_key(ns), name, json], [:hdel, rejected_key(ns), name],
     [:zadd, due_key(name, ns, shards), 0, name], [:zadd, names_key(ns), 0, name],
     [:srem, disabled_key(ns), name]]
  end

  # Runs the block's commands in MULTI, reading again if another writer changed the
  # definitions meanwhile (WATCH). True when written, false when the block gave none. The
  # block gets the current definition: nil, its text, or Oversized (its length asked first:
  # one over the limit is never read).
  # With `measure_only`, the block gets true for a definition within the limit (its text
  # not read), nil or Oversized.
  def change(redis, name, ns, measure_only: false)
    key = definitions_key(ns)
    loop do
      done = redis.watch(key) do
        size = redis.hstrlen(key, name)
        current = if size > MAX_DEFINITION_BYTES then Oversized.new(size)
                  elsif measure_only then size.positive? || nil
                  else redis.hget(key, name)
                  end
        commands = yield(current)
        if commands.empty?
          redis.unwatch
          return false
        end
        redis.multi { |tx| commands.each { |command| tx.public_send(*command) } }
      end
      return true unless done.nil?
    end
  end

  def parse(json)
    return nil unless json.is_a?(String)

    value = JSON.parse(json)
    value.is_a?(Hash) ? value : nil
  rescue JSON::ParserError
    nil
  end

  # A definition with a "source" belongs to that document: change or remove it there.
  def mine!(name, current)
    source = current && parse(current)&.fetch("source", nil)
    raise Error, "schedule #{name.inspect} belongs to #{source}; change it there" if source
  end

  # ---- moving sidekiq-cron's jobs (docs/migration.md) ----

  # sidekiq-cron's jobs as [set, key, fields]: 1.x lists its job hashes' keys in the set
  # cron_jobs, 2.x in cron_jobs:NAMESPACE.
  def sidekiq_cron_jobs(redis)
    sets = ["cron_jobs", *redis.scan_each(match: "cron_jobs:*")]
    sets.flat_map do |set|
      redis.smembers(set).filter_map do |key|
        fields = redis.hgetall(key)
        [set, key, fields] unless fields.empty?
      end
    end
  end

  # A sidekiq-cron job hash as a kiqbeat definition. `tz` is the zone sidekiq-cron read
  # crons in (the Sidekiq servers' local zone); a zone at the end of a cron still wins.
  # `fields`: kiqbeat's own fields to write into it, e.g. { "catch_up" => "latest",
  # "dst" => "fugit" } to keep sidekiq-cron's catch-up and daylight-saving behaviour.
  def from_sidekiq_cron(job, tz, fields = {})
    message = parse(job["message"].to_s) || {}
    args = JSON.parse(job["args"] || "[]") rescue [job["args"]]
    definition = { "cron" => job["cron"], "tz" => tz, "class" => job["klass"],
                   "args" => args.is_a?(Array) ? args : [args],
                   "queue" => message["queue"] || "default" }
    definition["description"] = job["description"] unless job["description"].to_s.empty?
    definition["enabled"] = false if job["status"] == "disabled"
    definition["include_metadata"] = true if job["date_as_argument"].to_s.match?(TRUTHY)
    if job["active_job"].to_s.match?(TRUTHY)
      definition["active_job"] = "legacy"
      prefix, delimiter = job["queue_name_prefix"].to_s, job["queue_name_delimiter"].to_s
      definition["queue"] = [prefix, definition["queue"]].join(delimiter.empty? ? "_" : delimiter) unless prefix.empty?
    end
    options = message.slice(*SIDEKIQ_OPTIONS)
    payload = message.reject { |key, _| SIDEKIQ_OPTIONS.include?(key) || %w[class args queue].include?(key) }
    definition.merge!(options)
    definition["payload"] = payload unless payload.empty?
    definition.merge(fields)
  end

  # Write each sidekiq-cron job as a kiqbeat schedule of the same name, wait until kiqbeat
  # has planned it, then delete sidekiq-cron's job (what Job#destroy deletes) in one step.
  # A definition kiqbeat sets aside is removed again and its job left to sidekiq-cron.
  # `client` (a KiqbeatClient, kiqbeat/client.rb) asks `kiqbeat validate`'s warnings for
  # each job before it is moved: where fugit, which sidekiq-cron used, fires the cron on
  # other days or, in the next 12 months, on daylight-saving nights at other times (all are
  # asked before any job is written: if the console fails, its error is raised and nothing
  # has moved).
  # `fields` (kiqbeat's own, such as { "catch_up" => "latest", "dst" => "fugit" }) are
  # written into every definition and checked with it.
  # Returns {"moved" => [names], "refused" => {name => why}, "warnings" => {name =>
  # [warnings]} (the jobs that have any), "warnings_checked" => true}; without a client,
  # "warnings" is {} and "warnings_checked" false: pass one to have them checked.
  def migrate_sidekiq_cron(redis, tz:, client: nil, fields: {}, ns: "", shards: 1,
                           timeout_s: 300, poll_s: 0.2)
    waiting, moved, refused, warnings = {}, [], {}, {}
    jobs = sidekiq_cron_jobs(redis)
    # Every job's warnings first: a console that fails raises before anything is written.
    jobs.each do |_, _, job|
      next if JSON.generate(from_sidekiq_cron(job, tz, fields)).bytesize > MAX_DEFINITION_BYTES # put refuses it

      said = client&.validate(job.merge(fields), format: "sidekiq-cron", name: job["name"],
                                                 app_zone: tz)
      warnings[job["name"]] = said["warnings"] unless said.nil? || said["warnings"].empty?
    end
    jobs.each do |set, key, job|
      put(redis, job["name"], from_sidekiq_cron(job, tz, fields), ns: ns, shards: shards)
      waiting[job["name"]] = [set, key]
    rescue Error => e # a document's schedule of that name
      refused[job["name"]] = e.message
    end
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout_s
    until waiting.empty?
      names = waiting.keys
      scores = redis.pipelined { |p| names.each { |n| p.zscore(due_key(n, ns, shards), n) } }
      reasons = redis.hmget(rejected_key(ns), *names)
      names.zip(scores, reasons).each do |name, score, reason|
        next if score == 0 # not planned yet

        set, key = waiting.delete(name)
        if score.nil? # set aside (or removed meanwhile): sidekiq-cron keeps it
          remove(redis, name, ns: ns, shards: shards)
          refused[name] = reason || "removed from the store meanwhile"
        else
          redis.multi do |tx|
            tx.srem(set, key)
            tx.del(key, "#{key}:enqueued", "#{key}:jid_history")
          end
          moved << name
        end
      end
      break if waiting.empty?

      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        waiting.each_key { |name| remove(redis, name, ns: ns, shards: shards) }
        raise Error, "kiqbeat planned none of #{waiting.keys.inspect} within #{timeout_s} s " \
                     "(is it running, on this Redis and key prefix?); they stay with sidekiq-cron"
      end
      sleep poll_s
    end
    { "moved" => moved, "refused" => refused, "warnings" => warnings,
      "warnings_checked" => !client.nil? }
  end
end
# --- KiqbeatStore: end ---
