defmodule Kiqbeat.ExqMiddleware do
  @moduledoc """
  Tells kiqbeat what became of every job it pushed, from an Exq worker: the worker protocol
  of kiqbeat's docs/store.md ("The worker protocol"), as `Kiqbeat::Middleware` does for
  Sidekiq. At the start and the end of each job that carries `"kiqbeat_schedule"`, one
  Redix pipeline: the report folded into the schedule's record by the call kiqbeat
  publishes in `<namespace>:kiqbeat:outcomes:script` ("1 EVALSHA SHA HISTORY" or "1 FCALL
  NAME HISTORY"), and the running marker set (start) or cleared if still this job's (end).
  The published call is read with a report (a GET in the same pipeline) and again each
  minute, kept in `:persistent_term` (written at most once a minute per namespace). Until
  it is known, or when the call fails (NOSCRIPT after a Redis restart, no function, any
  error reply: nothing was written), the entry is LPUSHed to
  `<namespace>:kiqbeat:outcomes:inbox` instead, the inbox LTRIMmed to 100,000 entries
  (after a failed call, one more round trip), and the next kiqbeat invocation folds it.
  A job of a schedule with `expires_after` that starts after its `"kiqbeat_expires_at"` is
  not run (its worker is replaced by a no-op) and is reported `expired`. A report that
  cannot be written is logged and never fails the job.

  Put it last in Exq's middleware list, after `Exq.Middleware.Job` (which decodes the job
  and picks the worker module this one may replace):

      config :exq,
        middleware: [Exq.Middleware.Stats, Exq.Middleware.Job, Exq.Middleware.Manager,
                     Exq.Middleware.Telemetry, Kiqbeat.ExqMiddleware]

  Known limit: Exq re-encodes only its own struct's fields when it retries a job, so a
  retried run carries no `kiqbeat_schedule` and reports nothing: a retry that succeeds
  leaves the tick `failed`. Not exercised by kiqbeat's CI (no Elixir there); written
  against Exq 0.23's `Exq.Middleware.Behaviour` and `Exq.Middleware.Pipeline`.
  """

  @behaviour Exq.Middleware.Behaviour
  require Logger
  alias Exq.Middleware.Pipeline

  @max_inbox 100_000
  @look_again_ms 60_000
  @ttl_ms 3_600_000
  @message_chars 200
  @clear ~s|if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0|

  defmodule Expired do
    @moduledoc false
    # Stands in for the worker of a job that expired before it started.
    def perform, do: :expired
  end

  @impl true
  def before_work(%Pipeline{assigns: assigns} = pipeline) do
    with {:ok, %{"kiqbeat_schedule" => name} = job} when is_binary(name) and name != "" <-
           Jason.decode(assigns.job_serialized) do
      entry = %{"s" => name, "t" => job["kiqbeat_tick"], "j" => job["jid"], "a" => 1}
      prefix = assigns.namespace <> ":kiqbeat:"
      marker = prefix <> "running:" <> name
      expires_at = job["kiqbeat_expires_at"]

      if is_integer(expires_at) and now_ms() > expires_at do
        report(assigns.redis, prefix, Map.merge(entry, %{"e" => "expired", "at" => now_ms()}), [])
        Logger.info("kiqbeat: #{name} job #{job["jid"]} expired before it started; not run")

        pipeline
        |> Pipeline.assign(:kiqbeat, :expired)
        |> Pipeline.assign(:worker_module, Expired)
        |> Pipeline.assign(:job, %{assigns.job | args: []})
      else
        report(assigns.redis, prefix, Map.merge(entry, %{"e" => "started", "at" => now_ms()}),
               [["SET", marker, to_string(job["jid"]), "PX", Integer.to_string(@ttl_ms)]])

        Pipeline.assign(pipeline, :kiqbeat, {entry, prefix, marker, mono_ms()})
      end
    else
      _ -> pipeline
    end
  end

  @impl true
  def after_processed_work(pipeline), do: ended(pipeline, %{"e" => "succeeded"})

  @impl true
  def after_failed_work(%Pipeline{assigns: assigns} = pipeline) do
    error = Map.get(assigns, :error)
    class = if is_exception(error), do: inspect(error.__struct__), else: "Error"
    message = to_string(Map.get(assigns, :error_message, "")) |> String.slice(0, @message_chars)
    ended(pipeline, %{"e" => "failed", "x" => class, "m" => message})
  end

  defp ended(%Pipeline{assigns: %{kiqbeat: {entry, prefix, marker, started}}} = pipeline, what) do
    fields = Map.merge(what, %{"at" => now_ms(), "d" => mono_ms() - started})
    report(pipeline.assigns.redis, prefix, Map.merge(entry, fields),
           [["EVAL", @clear, "1", marker, to_string(entry["j"])]])
    pipeline
  end

  defp ended(pipeline, _what), do: pipeline

  defp report(redis, prefix, entry, marker_commands) do
    inbox = prefix <> "outcomes:inbox"
    script_key = prefix <> "outcomes:script"
    text = Jason.encode!(entry)
    {call, look?} = fold_call(script_key)

    write =
      case call do
        {verb, target, history} -> [[verb, target, "1", inbox, "0", history, text]]
        nil -> push_commands(inbox, text)
      end

    look = if look?, do: [["GET", script_key]], else: []

    case Redix.pipeline(redis, write ++ look ++ marker_commands) do
      {:ok, replies} ->
        if look?, do: learn(script_key, Enum.at(replies, length(write)))

        case replies do
          [%Redix.Error{} = error | _] when call != nil ->
            # The script did not run: the inbox instead, until the call is read again.
            failed(script_key)
            Logger.info("kiqbeat: folding a report failed (#{inspect(error)}); writing to the inbox")
            {:ok, _} = Redix.pipeline(redis, push_commands(inbox, text))
            :ok

          _ ->
            :ok
        end

      {:error, reason} ->
        Logger.warning("kiqbeat: could not report #{entry["e"]} of #{entry["s"]}: #{inspect(reason)}")
    end
  rescue
    e -> Logger.warning("kiqbeat: could not report #{entry["e"]} of #{entry["s"]}: #{inspect(e)}")
  end

  defp push_commands(inbox, text) do
    [["LPUSH", inbox, text], ["LTRIM", inbox, "0", Integer.to_string(@max_inbox - 1)]]
  end

  # The published call ({verb, target, history} or nil: the inbox) and whether this report
  # reads it again (at most once a minute per namespace).
  defp fold_call(key) do
    now = mono_ms()
    {call, look_at} = :persistent_term.get({__MODULE__, key}, {nil, 0})

    if now >= look_at do
      :persistent_term.put({__MODULE__, key}, {call, now + @look_again_ms})
      {call, true}
    else
      {call, false}
    end
  end

  defp learn(key, value) do
    call =
      case is_binary(value) and String.split(value, " ") do
        ["1", verb, target, history] when verb in ["EVALSHA", "FCALL"] ->
          if Regex.match?(~r/\A\d+\z/, history), do: {verb, target, history}, else: nil

        _ ->
          nil
      end

    {old, look_at} = :persistent_term.get({__MODULE__, key}, {nil, 0})
    if old != call, do: :persistent_term.put({__MODULE__, key}, {call, look_at})
  end

  defp failed(key) do
    :persistent_term.put({__MODULE__, key}, {nil, mono_ms() + @look_again_ms})
  end

  defp now_ms, do: System.system_time(:millisecond)
  defp mono_ms, do: System.monotonic_time(:millisecond)
end
