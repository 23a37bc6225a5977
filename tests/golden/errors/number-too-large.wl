workload big {
  params { n: tokens = 99999999999999999999 }
  session s { user filler $n; reply 4 }
}
