workload w {
  params { big: tokens = 8k }
  session main {
    user filler $big
    reply 1
    wait $ttft_threshold
  }
  gates {
    hit: overall median(ttft{session=main}) < $ttft_threshold
  }
}
