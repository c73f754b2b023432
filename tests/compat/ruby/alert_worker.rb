# Workers for the alert tests: a real Sidekiq with Kiqbeat::Middleware (clients/ruby), on top
# of outcome_worker.rb. Run as `sidekiq -r tests/compat/ruby/alert_worker.rb -q outcomes`.
require_relative "outcome_worker"

# Raises while the Redis key SWITCH_KEY holds "fail", succeeds otherwise; writes the ledger.
class SwitchWorker
  include Sidekiq::Worker
  SWITCH_KEY = "kiqbeat-test:switch"

  def perform(*_args)
    OutcomeLedger.write(jid, "start")
    if Sidekiq.redis { |conn| conn.get(SWITCH_KEY) } == "fail"
      OutcomeLedger.write(jid, "raise")
      raise "kiqbeat test: switched to fail"
    end
    OutcomeLedger.write(jid, "end")
  end
end
