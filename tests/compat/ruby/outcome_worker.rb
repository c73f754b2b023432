# Workers for the outcome tests: a real Sidekiq with Kiqbeat::Middleware (clients/ruby).
#
# Run as `sidekiq -r tests/compat/ruby/outcome_worker.rb -q outcomes -c 3` with REDIS_URL set
# (KIQBEAT_TEST_NAMESPACE: run under redis-namespace with that namespace). Each job appends
# its own ledger to the Redis list LEDGER_KEY: {"jid", "event" (start | end | raise), "at"
# (epoch ms)}: what the worker knows independently of the middleware's reports.
require "json"
require "sidekiq"
require_relative "../../../clients/ruby/lib/kiqbeat/middleware"

module OutcomeLedger
  LEDGER_KEY = "kiqbeat-test:ledger"

  def self.write(jid, event)
    entry = JSON.generate("jid" => jid, "event" => event, "at" => (Time.now.to_f * 1000).floor)
    Sidekiq.redis { |conn| conn.rpush(LEDGER_KEY, entry) }
  end
end

namespace = ENV.fetch("KIQBEAT_TEST_NAMESPACE", "")
unless namespace.empty?
  require "redis-namespace"
  url = ENV.fetch("REDIS_URL")
  Sidekiq.configure_server do |config|
    config.redis = {url: url, namespace: namespace}
  end
end

# KIQBEAT_TEST_NO_MIDDLEWARE=1: without it (bench/middleware.py's baseline).
Sidekiq.configure_server do |config|
  unless ENV["KIQBEAT_TEST_NO_MIDDLEWARE"] == "1"
    config.server_middleware do |chain|
      chain.add Kiqbeat::Middleware, ttl: 120
    end
  end
  Sidekiq.options[:poll_interval_average] = 1
end

# Sleeps args[0] seconds (0: none), writing its start and end to the ledger.
class LedgerWorker
  include Sidekiq::Worker

  def perform(seconds = 0, *_rest)
    OutcomeLedger.write(jid, "start")
    sleep(seconds.to_f) if seconds.to_f.positive?
    OutcomeLedger.write(jid, "end")
  end
end

# Raises every time.
class RaisingWorker
  include Sidekiq::Worker

  def perform(*_args)
    OutcomeLedger.write(jid, "start")
    OutcomeLedger.write(jid, "raise")
    raise ArgumentError, "kiqbeat test: deliberate failure " + ("x" * 300)
  end
end

# Raises on its first run and succeeds on its retry, a second later.
class FlakyWorker
  include Sidekiq::Worker
  sidekiq_retry_in { |_count, _exception| 1 }

  def perform(*_args)
    OutcomeLedger.write(jid, "start")
    seen = Sidekiq.redis { |conn| conn.incr("kiqbeat-test:flaky:#{jid}") }
    if seen == 1
      OutcomeLedger.write(jid, "raise")
      raise "kiqbeat test: fails once"
    end
    OutcomeLedger.write(jid, "end")
  end
end

# Succeeds or raises by its jid's last hex digit (even: succeeds; odd: raises), so a test
# knows each tick's outcome from its jid alone.
class ByJidWorker
  include Sidekiq::Worker

  def perform(*_args)
    OutcomeLedger.write(jid, "start")
    if jid[-1].to_i(16).odd?
      OutcomeLedger.write(jid, "raise")
      raise KeyError, "odd jid"
    end
    OutcomeLedger.write(jid, "end")
  end
end

# An empty job, for the middleware's cost (bench).
class EmptyWorker
  include Sidekiq::Worker

  def perform(*_args); end
end
