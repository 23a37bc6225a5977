workload w {
  params { max_context: tokens = 32k }
  session main { user filler $max_context; reply 1 }
}
