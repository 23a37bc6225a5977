workload ranges {
  concurrency = 0
  timeout = 0s
  hit_ratio = 200%
  session s {
    user filler 0.5
    reply 0
    repeat -2 { user "x"; reply 4 }
    wait -1s
  }
}
