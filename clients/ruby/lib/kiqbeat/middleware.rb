# Kiqbeat::Middleware: a Sidekiq server middleware that tells kiqbeat what became of every job
# it pushed: started, succeeded or failed (error class and a clipped message), how long it
# ran and which attempt it was. docs/store.md, "The worker protocol", is the format; the
# reports make each schedule's record (`kiqbeat report`, `status`, the console, the alerts).
# It also keeps the running marker `overlap: skip` and `overlap: buffer_one` read (what
# Kiqbeat::RunningMiddleware did: use one or the other), and does not run a job of a
# schedule with `expires_after` that starts too late (reported `expired`).
#
#   require "kiqbeat/middleware"   # with clients/ruby/lib on the load path
#   Sidekiq.configure_server do |config|
#     config.server_middleware { |chain| chain.add Kiqbeat::Middleware, ttl: 3600 }
#   end
#
# Every job kiqbeat pushes carries "kiqbeat_schedule" (the schedule's name) and "kiqbeat_tick"
# (epoch ms); any other job passes through untouched, without a Redis call. One round trip
# (a pipeline) when the job starts and one when it ends; a report that cannot be written is
# logged and never fails, retries or delays the job. Works with Sidekiq 6 (redis-rb 4) and 7+
# (redis-client): both take `pipelined { |p| p.call(...) }`; under redis-namespace (whose
# `call` is not namespaced) it uses the named commands, which are.
#
# How a report is written: the worker folds it into the schedule's record itself, by the
# script kiqbeat publishes in `kiqbeat:outcomes:script` ("1 EVALSHA SHA HISTORY", or "1 FCALL
# NAME HISTORY" when kiqbeat runs as a function library; this gem ships no Lua), so the
# record is current when the job ends and kiqbeat's invocations do no work per report. The
# published call is read with a report (a GET in the same pipeline) and looked at again
# every minute the same way. Until it is known, or when the call fails (NOSCRIPT after a
# Redis restart or SCRIPT FLUSH, no function, Redis 6 without FCALL, FCALL under
# redis-namespace, any error), the report is LPUSHed to `kiqbeat:outcomes:inbox` instead
# (after a failed call: one more round trip) and the next invocation folds it.
module Kiqbeat
  class Middleware
    SCHEDULE_KEY = "kiqbeat_schedule"
    TICK_KEY = "kiqbeat_tick"
    EXPIRES_KEY = "kiqbeat_expires_at"
    DEFAULT_TTL_S = 3600
    MAX_INBOX = 100_000 # lib/kiqbeat/core/limits.py MAX_OUTCOMES_INBOX
    MESSAGE_CHARS = 200
    PROTOCOL = "1" # the published call's version this middleware speaks
    LOOK_AGAIN_S = 60 # how often the published call is read again
    # Delete the running marker only if it is still this job's (a job that outlived its TTL
    # must not clear the next one's).
    CLEAR = <<~LUA
      if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
      return 0
    LUA

    # Options: ttl: seconds the running marker lives at most (default 3600; above the job's
    # longest run); namespace: kiqbeat's key prefix (default ""; under redis-namespace,
    # whose connection adds the prefix already, leave it "").
    def initialize(options = {})
      options = options.transform_keys(&:to_sym)
      ttl = options.fetch(:ttl, DEFAULT_TTL_S)
      raise ArgumentError, "ttl must be a positive number of seconds, got #{ttl.inspect}" unless
        ttl.is_a?(Numeric) && ttl.positive?

      @ttl_ms = (ttl * 1000).ceil
      @namespace = options.fetch(:namespace, "").to_s
      @inbox = "#{@namespace}kiqbeat:outcomes:inbox"
      @fold = Fold.for("#{@namespace}kiqbeat:outcomes:script")
    end

    def call(_worker, job, _queue)
      name = job[SCHEDULE_KEY]
      return yield unless name.is_a?(String) && !name.empty?

      jid = job["jid"].to_s
      # Sidekiq sets retry_count 0 at the first failure: the second run carries 0.
      attempt = job["retry_count"].is_a?(Integer) ? job["retry_count"] + 2 : 1
      base = {"s" => name, "t" => job[TICK_KEY], "j" => jid}
      marker = "#{@namespace}kiqbeat:running:#{name}"
      expires_at = job[EXPIRES_KEY]
      if attempt == 1 && expires_at.is_a?(Integer) && now_ms > expires_at
        report(base.merge("e" => "expired", "at" => now_ms, "a" => attempt))
        Sidekiq.logger.info("kiqbeat: #{name} job #{jid} expired before it started; not run")
        return nil
      end

      started = monotonic_ms
      report(base.merge("e" => "started", "at" => now_ms, "a" => attempt),
             [:set, marker, jid])
      begin
        yield
      rescue SignalException
        # Sidekiq::Shutdown (an Interrupt) on a deploy, or a signal: the job did not fail.
        # Sidekiq puts it back in its queue; the tick stays running until its re-run reports.
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException -- reported, then re-raised
        report(base.merge("e" => "failed", "at" => now_ms, "a" => attempt,
                          "d" => monotonic_ms - started, "x" => e.class.name.to_s,
                          "m" => e.message.to_s[0, MESSAGE_CHARS]),
               [:clear, marker, jid])
        raise
      end
      report(base.merge("e" => "succeeded", "at" => now_ms, "a" => attempt,
                        "d" => monotonic_ms - started),
             [:clear, marker, jid])
    end

    private

    def now_ms
      (Time.now.to_f * 1000).floor
    end

    def monotonic_ms
      Process.clock_gettime(Process::CLOCK_MONOTONIC, :millisecond)
    end

    # One pipeline: the entry folded by kiqbeat's published script (or, without it, pushed
    # into the inbox, trimmed), the published call read when due, and the marker set or
    # cleared. Never raises.
    def report(entry, marker = nil)
      text = JSON.generate(entry)
      Sidekiq.redis do |conn|
        named = conn.respond_to?(:namespace) # redis-namespace: only named commands are prefixed
        call = @fold.call(named)
        look = @fold.look?
        begin
          replies = conn.pipelined do |p|
            call ? fold(p, named, call, text) : push(p, named, text)
            named ? p.get(@fold.key) : p.call("GET", @fold.key) if look
            write_marker(p, named, *marker) if marker
          end
          @fold.learn(replies[call ? 1 : 2]) if look
        rescue StandardError => e
          raise unless call

          # The script did not run (NOSCRIPT, no function, any error): the inbox instead.
          @fold.failed
          Sidekiq.logger.info("kiqbeat: folding a report failed (#{e.class}: #{e.message}); " \
                              "writing to the inbox until the published call is read again")
          conn.pipelined { |p| push(p, named, text) }
        end
      end
    rescue StandardError => e
      Sidekiq.logger.warn("kiqbeat: could not report #{entry["e"]} of #{entry["s"]} job " \
                          "#{entry["j"]}: #{e.class}: #{e.message}")
    end

    def fold(pipe, named, call, text)
      verb, target, history = call
      if named
        pipe.evalsha(target, keys: [@inbox], argv: [0, history, text])
      else
        pipe.call(verb, target, 1, @inbox, 0, history, text)
      end
    end

    def push(pipe, named, text)
      if named
        pipe.lpush(@inbox, text)
        pipe.ltrim(@inbox, 0, MAX_INBOX - 1)
      else
        pipe.call("LPUSH", @inbox, text)
        pipe.call("LTRIM", @inbox, 0, MAX_INBOX - 1)
      end
    end

    def write_marker(pipe, named, action, key, jid)
      if action == :set
        named ? pipe.set(key, jid, px: @ttl_ms) : pipe.call("SET", key, jid, "PX", @ttl_ms)
      else
        named ? pipe.eval(CLEAR, [key], [jid]) : pipe.call("EVAL", CLEAR, 1, key, jid)
      end
    end

    # The published fold call of one kiqbeat namespace, shared by the middleware's instances
    # (Sidekiq 6 makes one per job) and threads: what it is, and when to read it again.
    class Fold
      @all = {}
      @lock = Mutex.new
      class << self
        def for(key)
          @lock.synchronize { @all[key] ||= new(key) }
        end
      end

      attr_reader :key

      def initialize(key)
        @key = key
        @lock = Mutex.new
        @call = nil # [verb, target, history]
        @look_at = 0.0 # monotonic seconds from which to read the published call (again)
      end

      # The call to make, or nil (write to the inbox). Under redis-namespace only EVALSHA,
      # whose keys it prefixes.
      def call(named)
        call = @lock.synchronize { @call }
        call && (!named || call[0] == "EVALSHA") ? call : nil
      end

      # Whether this report reads the published call too (then `learn` its reply).
      def look?
        @lock.synchronize do
          now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          next false if now < @look_at

          @look_at = now + LOOK_AGAIN_S
          true
        end
      end

      def learn(value)
        protocol, verb, target, history = value.to_s.split(" ")
        known = protocol == PROTOCOL && %w[EVALSHA FCALL].include?(verb) && target &&
                history.to_s.match?(/\A\d+\z/)
        @lock.synchronize { @call = known ? [verb, target, history] : nil }
      end

      # The call failed: the inbox until the published call is read again (a minute on).
      def failed
        @lock.synchronize do
          @call = nil
          @look_at = Process.clock_gettime(Process::CLOCK_MONOTONIC) + LOOK_AGAIN_S
        end
      end
    end
  end
end

require "json"
