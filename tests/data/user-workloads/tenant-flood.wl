# A victim's growing conversation while tenants flood in, at most 8 running at once.
workload tenant_flood_capped {
  doc "A capped flood of tenants next to one victim"
  params { tenants: int = 24; cap: int = 8; rate: float = 100 }
  session victim {
    system "You are a helpful assistant."
    repeat 4 label grow { user filler 1k; reply 16; wait 50ms }
  }
  session tenant repeat $tenants arrive every exponential(1s / $rate) concurrency $cap {
    user filler 1.5k; reply 8 label one_shot
  }
  gates { on_time: overall p99(schedule_lag{one_shot}) < 10s warn }
}
