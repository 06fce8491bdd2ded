"""The attention probe: which attention backends build, run and train a real draft step here, measured.

``matrix``     ``probe(...)``: the measured backend matrix, each cell a real draft step in a worker subprocess
``worker``     what runs in that subprocess: one tiny draft built once, each requested cell run and timed
``recommend``  what the matrix concludes: ``recommend``, ``recommendations``, ``probe_row``, ``settings_table``,
               ``speed_ratios``, ``recommendation_lines``
``plots``      ``plot_timings(matrix)`` -> Figure
``cache``      cells measured once, read back when asked again with the same setting (what the key holds)
``zygote``     CPU workers forked from one process that imported torch and speculators once (~12 s saved each)
"""
