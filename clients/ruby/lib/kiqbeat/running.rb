# Kiqbeat::RunningMiddleware: a Sidekiq server middleware that tells kiqbeat a schedule's job
# is running, so that `overlap: skip` also skips a tick while the previous job runs (not only
# while it waits in its queue or the schedule set). Kiqbeat::Middleware (kiqbeat/middleware)
# does this too and reports each job's outcome: use one or the other. docs/compatibility.md,
# "The worker middleware".
#
#   require "kiqbeat/running"   # with clients/ruby/lib on the load path
#   Sidekiq.configure_server do |config|
#     config.server_middleware { |chain| chain.add Kiqbeat::RunningMiddleware, ttl: 3600 }
#   end
#
# Every job kiqbeat pushes carries the schedule's name under
# "kiqbeat_schedule". While such a job runs, the key "<ns>kiqbeat:running:<name>" holds its
# jid, with a TTL (default 1 h: set it above the job's longest run); when the job ends,
# succeeded or failed, the key is deleted if it still holds that jid. Any other job passes
# through untouched, without a Redis call. A marker that cannot be written or cleared is
# logged and never fails the job (a failure would retry it: a second run). Works with Sidekiq
# 6 (redis-rb) and 7+ (redis-client): both take `call("SET", ...)`.
module Kiqbeat
  class RunningMiddleware
    # The job key naming the schedule (lib/kiqbeat/core/payload.py writes it).
    SCHEDULE_KEY = "kiqbeat_schedule"
    DEFAULT_TTL_S = 3600
    # Delete the marker only if it is still this job's: a job that outlived its TTL must not
    # clear the marker of the next one.
    CLEAR = <<~LUA
      if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
      return 0
    LUA

    # The marker key of a schedule (lib/kiqbeat/redis/keys.py `running`). `ns` is kiqbeat's
    # key prefix ("" unless KIQBEAT_NAMESPACE is set); under redis-namespace, whose
    # connection already adds the prefix, leave it "".
    def self.key(name, ns = "")
      "#{ns}kiqbeat:running:#{name}"
    end

    # Options: ttl: seconds the marker lives at most (default 3600); namespace: kiqbeat's key
    # prefix (default "").
    def initialize(options = {})
      options = options.transform_keys(&:to_sym)
      ttl = options.fetch(:ttl, DEFAULT_TTL_S)
      raise ArgumentError, "ttl must be a positive number of seconds, got #{ttl.inspect}" unless
        ttl.is_a?(Numeric) && ttl.positive?

      @ttl_ms = (ttl * 1000).ceil
      @namespace = options.fetch(:namespace, "").to_s
    end

    def call(_worker, job, _queue)
      name = job[SCHEDULE_KEY]
      return yield unless name.is_a?(String) && !name.empty?

      key = self.class.key(name, @namespace)
      jid = job["jid"].to_s
      marked = marker("mark") { |conn| conn.call("SET", key, jid, "PX", @ttl_ms) }
      begin
        yield
      ensure
        marker("clear") { |conn| conn.call("EVAL", CLEAR, 1, key, jid) } if marked
      end
    end

    private

    def marker(what)
      Sidekiq.redis { |conn| yield conn }
      true
    rescue StandardError => e
      Sidekiq.logger.warn("kiqbeat: could not #{what} the running marker: #{e.class}: #{e.message}")
      false
    end
  end
end
