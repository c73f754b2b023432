# Kiqbeat::Middleware: a Sidekiq server middleware that tells kiqbeat what became of every job
# it pushed: started, succeeded or failed (error class and a clipped message), how long it
# ran and which attempt it was. docs/store.md, "The worker protocol", is the format; kiqbeat
# folds these reports into each schedule's record (`kiqbeat report`, `status`, the console,
# the alerts). It also keeps the running marker `overlap: skip` reads (`overlap` is `allow`
# or `skip`; what Kiqbeat::RunningMiddleware did: use one or the other), and does not run a
# job of a schedule with `expires_after` that starts too late (reported `expired`).
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
module Kiqbeat
  class Middleware
    SCHEDULE_KEY = "kiqbeat_schedule"
    TICK_KEY = "kiqbeat_tick"
    EXPIRES_KEY = "kiqbeat_expires_at"
    DEFAULT_TTL_S = 3600
    MAX_INBOX = 100_000 # lib/kiqbeat/core/limits.py MAX_OUTCOMES_INBOX
    MESSAGE_CHARS = 200
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

    # One pipeline: the entry into the inbox, the inbox trimmed, and the marker set or
    # cleared. Never raises.
    def report(entry, marker = nil)
      text = JSON.generate(entry)
      Sidekiq.redis do |conn|
        named = conn.respond_to?(:namespace) # redis-namespace: only named commands are prefixed
        conn.pipelined do |p|
          if named
            p.lpush(@inbox, text)
            p.ltrim(@inbox, 0, MAX_INBOX - 1)
          else
            p.call("LPUSH", @inbox, text)
            p.call("LTRIM", @inbox, 0, MAX_INBOX - 1)
          end
          write_marker(p, named, *marker) if marker
        end
      end
    rescue StandardError => e
      Sidekiq.logger.warn("kiqbeat: could not report #{entry["e"]} of #{entry["s"]} job " \
                          "#{entry["j"]}: #{e.class}: #{e.message}")
    end

    def write_marker(pipe, named, action, key, jid)
      if action == :set
        named ? pipe.set(key, jid, px: @ttl_ms) : pipe.call("SET", key, jid, "PX", @ttl_ms)
      else
        named ? pipe.eval(CLEAR, [key], [jid]) : pipe.call("EVAL", CLEAR, 1, key, jid)
      end
    end
  end
end

require "json"
