# Workers for kiqbeat's real-Sidekiq tests: every job records what Sidekiq handed it.
#
# Run as `sidekiq -r tests/compat/ruby/worker.rb -q default -q critical -c 2` with REDIS_URL
# set. Each run appends one JSON record to the Redis list RUNS_KEY: the raw job hash as the
# server middleware saw it, the values Sidekiq's own API reads from it (Sidekiq::JobRecord),
# and the arguments `perform` received. The Python tests read that list.
require "json"
require "logger"
require "sidekiq"
require "sidekiq/api"
# The middleware kiqbeat ships for `overlap: skip` (marks a schedule's job while it runs).
require_relative "../../../clients/ruby/lib/kiqbeat/running"

begin
  require "active_job"
  require "active_job/queue_adapters/sidekiq_adapter"
  KIQBEAT_ACTIVE_JOB = ActiveJob::VERSION::STRING
rescue LoadError
  KIQBEAT_ACTIVE_JOB = nil
end

module KiqbeatCompat
  RUNS_KEY = "kiqbeat-compat:runs"
  # Sidekiq 6.3 renamed the API's job wrapper to JobRecord; older ones call it Job.
  RECORD = defined?(Sidekiq::JobRecord) ? Sidekiq::JobRecord : Sidekiq::Job

  def self.record(fields)
    Sidekiq.redis { |conn| conn.rpush(RUNS_KEY, JSON.generate(fields)) }
  end

  # Server middleware: one record per execution, before the worker runs.
  class Recorder
    def call(_worker, job, queue)
      api = RECORD.new(job, queue)
      KiqbeatCompat.record(
        "kind" => "middleware",
        "jid" => job["jid"],
        "queue" => queue,
        "job" => job,
        "has_retry_count" => job.key?("retry_count"),
        "api_display_class" => api.display_class,
        "api_display_args" => api.display_args,
        "api_enqueued_at" => api.enqueued_at&.to_f,
        "api_enqueued_year" => api.enqueued_at&.year,
        "api_created_at" => api.created_at.to_f,
        "api_created_year" => api.created_at.year,
        "ran_at" => Time.now.to_f,
        "sidekiq" => Sidekiq::VERSION
      )
      yield
    end
  end
end

Sidekiq.configure_server do |config|
  config.server_middleware do |chain|
    chain.add KiqbeatCompat::Recorder
    chain.add Kiqbeat::RunningMiddleware, ttl: 120
  end
  # Poll the `schedule` set about every second and skip the 10 s start-up wait, so jobs
  # pushed ahead with `lookahead` are released within the test's time budget.
  Sidekiq.options[:poll_interval_average] = 1
end

class RecordingWorker
  include Sidekiq::Worker

  def perform(*args)
    KiqbeatCompat.record("kind" => "perform", "class" => self.class.name, "jid" => jid,
                         "args" => args)
  end
end

class CriticalWorker < RecordingWorker; end

# Runs for args[0] seconds (a job still running), then records its end.
class SleepingWorker
  include Sidekiq::Worker

  def perform(seconds, *_rest)
    sleep(seconds.to_f)
    KiqbeatCompat.record("kind" => "perform", "class" => self.class.name, "jid" => jid,
                         "args" => [seconds])
  end
end

class FailingWorker
  include Sidekiq::Worker

  def perform(*args)
    KiqbeatCompat.record("kind" => "perform", "class" => self.class.name, "jid" => jid,
                         "args" => args)
    raise "kiqbeat compat: deliberate failure"
  end
end

if KIQBEAT_ACTIVE_JOB
  ActiveJob::Base.queue_adapter = :sidekiq
  ActiveJob::Base.logger = Logger.new(nil)

  class ReportJob < ActiveJob::Base
    def perform(*args)
      KiqbeatCompat.record("kind" => "perform", "class" => self.class.name,
                           "jid" => provider_job_id, "job_id" => job_id, "args" => args,
                           "queue" => queue_name, "executions" => executions,
                           "active_job" => KIQBEAT_ACTIVE_JOB)
    end
  end
end
