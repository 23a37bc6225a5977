workload w {
  params {
    size: tokens = 500ms
    pause: duration = 2s in 0..10
    depth: ratio = 80%
  }
  settle = 8k
  session main {
    user filler $size needle at $pause
    reply 1
    wait 5
    wait $pause + $depth
    probe $pause * $pause
  }
}
